#include "tools/migrate/link_rate.h"

#include <algorithm>

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
  const double rate = BytesPerSecond();
  if (rounds_.empty() || rate <= 0) return 0;
  // The shortest round is the one its fixed cost weighs most in (the
  // round that set the rate shows none by construction).
  const auto shortest = std::min_element(
      rounds_.begin(), rounds_.end(),
      [](const auto& a, const auto& b) { return a.second < b.second; });
  return std::max(0.0, shortest->second - shortest->first / rate);
}

}  // namespace ramferry::migrate
