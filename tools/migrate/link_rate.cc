#include "tools/migrate/link_rate.h"

#include <algorithm>
#include <cmath>

namespace ramferry::migrate {

void LinkRate::AddRound(uint64_t bytes, double seconds) {
  if (seconds <= 0) return;
  rounds_.push_back({bytes, seconds});
  total_bytes_ += bytes;
  total_seconds_ += seconds;
  if (bytes >= kJudgingBytes) {
    best_bytes_per_s_ = std::max(best_bytes_per_s_, bytes / seconds);
  }
}

double LinkRate::BytesPerSecond() const {
  if (best_bytes_per_s_ > 0) return best_bytes_per_s_;
  return total_seconds_ > 0 ? total_bytes_ / total_seconds_ : 0;
}

std::optional<double> LinkRate::SecondsFor(uint64_t pages,
                                           uint64_t page_bytes) const {
  if (pages == 0) return 0.0;
  const double rate = BytesPerSecond();
  if (rate <= 0) return std::nullopt;
  return static_cast<double>(pages) * static_cast<double>(page_bytes) / rate;
}

}  // namespace ramferry::migrate

namespace ramferry::migrate {

double LinkRate::RoundTripSeconds() const {
  if (rounds_.empty() || BytesPerSecond() <= 0) return 0;
  double fastest = 0;
  for (const auto& [bytes, seconds] : rounds_) {
    fastest = std::max(fastest, bytes / seconds);
  }
  // The shortest round is the one its fixed cost weighs most in.
  const auto shortest = std::min_element(
      rounds_.begin(), rounds_.end(),
      [](const auto& a, const auto& b) { return a.second < b.second; });
  return std::max(0.0, shortest->second - shortest->first / fastest);
}

}  // namespace ramferry::migrate

namespace ramferry::migrate {

uint64_t LinkRate::smallest_round_bytes() const {
  uint64_t smallest = UINT64_MAX;
  for (const auto& round : rounds_) smallest = std::min(smallest, round.first);
  return smallest;
}

std::optional<double> LinkRate::RoundSeconds(uint64_t bytes) const {
  const std::optional<double> at_link = SecondsFor(bytes, 1);
  if (!at_link) return std::nullopt;
  if (bytes == 0) return RoundTripSeconds();
  double seconds = RoundTripSeconds() + *at_link;
  // The measured round nearest in size (by ratio): its own rate.
  const std::pair<uint64_t, double>* nearest = nullptr;
  double distance = 0;
  for (const auto& round : rounds_) {
    if (round.first == 0) continue;
    const double d = std::abs(std::log(static_cast<double>(round.first) /
                                       static_cast<double>(bytes)));
    if (nearest == nullptr || d < distance) {
      nearest = &round;
      distance = d;
    }
  }
  if (nearest != nullptr) {
    // A larger round at that round's rate; a smaller one saves only the
    // bytes it lacks, at the link's rate (its fixed cost stays).
    const double b = static_cast<double>(nearest->first);
    const double like_nearest =
        static_cast<double>(bytes) >= b
            ? static_cast<double>(bytes) * nearest->second / b
            : nearest->second -
                  (b - static_cast<double>(bytes)) / BytesPerSecond();
    seconds = std::max(seconds, like_nearest);
  }
  return seconds;
}

}  // namespace ramferry::migrate
