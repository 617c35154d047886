// What the link carries, as pre-copy measured it, and so how long the
// pages still dirty would take to move: the estimate that decides when to
// stop and copy.
#ifndef RAMFERRY_TOOLS_MIGRATE_LINK_RATE_H_
#define RAMFERRY_TOOLS_MIGRATE_LINK_RATE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace ramferry::migrate {

class LinkRate {
 public:
  // Rounds that moved less than this are dominated by the round trip;
  // the fastest round above it is taken as the link.
  static constexpr uint64_t kJudgingBytes = 16u << 20;

  void AddRound(uint64_t bytes, double seconds);

  // Bytes per second: the fastest round of at least kJudgingBytes, else
  // all rounds together (a small region never has such a round). Zero
  // until a round moved bytes in measurable time.
  double BytesPerSecond() const;

  // Seconds to move `pages` pages of `page_bytes`, or nullopt while the
  // link is unmeasured: an unknown estimate must never read as "fits".
  std::optional<double> SecondsFor(uint64_t pages, uint64_t page_bytes) const;

  // What a round costs beyond its bytes, as the shortest round showed
  // it: the SYNC barrier and the destination's confirmation (one round
  // trip) and the flush of the channels' completions. Its bytes are
  // counted at the fastest rate any round went (round 0's first touches
  // of the destination's pages make the link's rate an underestimate
  // there). 0 until a round was measured.
  double RoundTripSeconds() const;

  // Rounds measured so far, and the fewest bytes one of them moved
  // (UINT64_MAX: none).
  size_t rounds() const { return rounds_.size(); }
  uint64_t smallest_round_bytes() const;

  // How long a round of `bytes` takes, or nullopt while the link is
  // unmeasured: its round trip and its bytes at BytesPerSecond(), or, if
  // slower, as the measured round nearest its size went (a larger round
  // at that round's rate, a smaller one its time less the bytes it lacks
  // at the link's rate): small rounds go slower than large ones, their
  // fixed cost is more than the round trip RoundTripSeconds() sees, and
  // a final round is small.
  std::optional<double> RoundSeconds(uint64_t bytes) const;

 private:
  std::vector<std::pair<uint64_t, double>> rounds_;  // bytes, seconds
  double best_bytes_per_s_ = 0;
  uint64_t total_bytes_ = 0;
  double total_seconds_ = 0;
};

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_LINK_RATE_H_
