// What a stop-and-copy switchover costs, predicted from what pre-copy
// measured: the downtime the limit (--downtime-limit) is compared with.
//
// The downtime runs from the pause's request to the final round's
// confirmation, and has four parts, each of which the estimate counts:
//   pause     until the workload's writers are stopped (its handler, for
//             an attached workload): as measured by an earlier pause of
//             this run, else nothing known;
//   collect   the last dirty collection: as long as the last live one,
//             longer in proportion if it finds more pages;
//   pages     the pages dirty at the last live collection, plus those the
//             workload dirties until its pause holds (its measured rate
//             over the pause and the collection), at the rate final
//             rounds go (LinkRate::FinalBytesPerSecond);
//   barrier   the final round's fixed cost: SYNC, the destination's
//             confirmation, the flush of the completions.
// Before the pause (Before) the pause and the pages dirtied meanwhile are
// predictions; once paused and collected (Paused) they are measured, and
// only the final round is left to predict. A final round of ProbePages()
// or more is measured too before it is decided on: its first quarter goes
// as a round of its own (the probe), and the rest is predicted at the rate
// the probe went (AfterProbe). Live rounds are no guide to that rate: the
// workload's writes compete with the channels for CPU (and its faults on
// write-protected pages cost a host exit each on a shadow-paged guest): a
// paused final round went up to 2x faster per byte than the live round
// before it (an attached workload), or slower (memload's smaller final
// rounds; bench/downtime/matrix.py measured both). The migration
// tool decides the switchover on the last of these: a final round that
// would not fit resumes the workload for more pre-copy (or switches to
// post-copy), so the limit is kept where pre-copy can keep it.
//
// Pure arithmetic; thread-compatible.
#ifndef RAMFERRY_TOOLS_MIGRATE_SWITCHOVER_ESTIMATE_H_
#define RAMFERRY_TOOLS_MIGRATE_SWITCHOVER_ESTIMATE_H_

#include <cstdint>
#include <optional>

#include "tools/migrate/link_rate.h"

namespace ramferry::migrate {

class SwitchoverEstimate {
 public:
  SwitchoverEstimate(const LinkRate& link, uint64_t region_pages,
                     uint64_t page_bytes)
      : link_(link), region_pages_(region_pages), page_bytes_(page_bytes) {}

  // A live round's dirty collection: how long it took, what it found.
  void NoteCollect(double seconds, uint64_t pages);
  // A pause that took effect in `seconds` (an abandoned switchover's).
  void NotePause(double seconds);

  // No estimate before the pause for a final round this many times
  // smaller than every measured round.
  static constexpr uint64_t kLargerThanMeasured = 8;

  // The downtime of stopping now, with `pending_pages` dirty at the last
  // collection and the workload dirtying `dirty_pages_per_s`; nullopt
  // (an unknown estimate never fits) until a round after round 0 was
  // measured, and while the final round would be kLargerThanMeasured
  // times smaller than every measured round.
  std::optional<double> Before(uint64_t pending_pages,
                               double dirty_pages_per_s) const;
  // The downtime once `elapsed_s` passed since the pause was asked for
  // and the final collection found `final_pages`: the elapsed time and
  // the final round.
  std::optional<double> Paused(double elapsed_s, uint64_t final_pages) const;

  // Final rounds from this size on are probed: below it a round is mostly
  // its fixed cost, which the rounds measured already show.
  static constexpr uint64_t kProbeFromBytes = 4u << 20;
  // A final round Paused() put past this many times the limit is given up
  // without a probe (the probe alone would overrun the limit).
  static constexpr double kHopelessOverLimit = 3;
  // How many of `final_pages` to send first as the probe, with `paused`
  // the Paused() estimate and `limit_s` the downtime limit: a quarter, or
  // 0 (no probe) for a small round or a hopeless one.
  uint64_t ProbePages(uint64_t final_pages, std::optional<double> paused,
                      double limit_s) const;
  // The downtime once `elapsed_s` passed since the pause was asked for,
  // the probe included, which moved `probe_pages` in `probe_s`: the rest
  // of the final round at the probe's rate, its fixed cost (the round
  // trip, at most half the probe's time) counted once.
  double AfterProbe(double elapsed_s, uint64_t probe_pages, double probe_s,
                    uint64_t rest_pages) const;

  // The parts of the last Before(), for the report.
  double pause_s() const { return pause_s_.value_or(0); }
  double collect_s(uint64_t pages) const;

 private:
  std::optional<double> FinalRoundSeconds(uint64_t pages) const;

  const LinkRate& link_;
  uint64_t region_pages_;
  uint64_t page_bytes_;
  std::optional<double> pause_s_;  // the longest pause measured
  double last_collect_s_ = 0;
  uint64_t last_collect_pages_ = 0;
};

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_SWITCHOVER_ESTIMATE_H_
