// Which pages each channel carried in the round not yet confirmed, kept
// only when the session survives channel loss: a lost channel's share is
// taken from here and scheduled again on the other channels.
//
// One bitmap per channel and region, not a list of batches: the bitmaps
// feed straight back into Scheduler::ScheduleRound. Clearing costs what the
// round recorded, not the region: each channel keeps the words it set, so a
// round of a few pages in 1 TiB clears a few words, not channels x 32 MiB.
// The source's caller thread owns it.
#ifndef RAMFERRY_ENGINE_SENT_LEDGER_H_
#define RAMFERRY_ENGINE_SENT_LEDGER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/region.h"

namespace ramferry::engine {

class SentLedger {
 public:
  SentLedger(size_t channels, absl::Span<const Region> regions);

  // `channel` carries the pages at byte `offsets` of region index `region`.
  void Record(size_t channel, uint32_t region,
              absl::Span<const uint64_t> offsets);
  // The pages `channel` carried, one bitmap per region, in region order
  // (what ScheduleRound takes, and clears as it takes).
  absl::Span<DirtyBitmap* const> Of(size_t channel) { return ptrs_[channel]; }
  // Forgets what `channel` carried, in time proportional to what it
  // recorded since the last clear.
  void Clear(size_t channel);
  void ClearAll();
  // Words Clear(channel) would visit (what a test checks the cost by).
  size_t touched_words(size_t channel) const {
    return touched_[channel].size();
  }

 private:
  struct Word {
    uint32_t region;
    size_t index;
  };

  absl::Span<const Region> regions_;
  std::vector<std::vector<std::unique_ptr<DirtyBitmap>>> bitmaps_;
  std::vector<std::vector<DirtyBitmap*>> ptrs_;
  // Per channel: every word set since the last Clear. A word taken by
  // ScheduleRound and set again is listed twice, which costs one more
  // clear and nothing else.
  std::vector<std::vector<Word>> touched_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_SENT_LEDGER_H_
