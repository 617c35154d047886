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
// only the final round is left to predict. The migration tool decides the
// switchover on the second: a final round that would not fit resumes the
// workload for more pre-copy (or switches to post-copy), so the limit is
// kept where pre-copy can keep it.
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
