// Which pages each channel carried in the round not yet confirmed, kept
// only when the session survives channel loss: a lost channel's share is
// taken from here and scheduled again on the other channels.
//
// One bitmap per channel and region (pages / 8 bytes each), not a list of
// batches: the cost is fixed however big the round, and the bitmaps feed
// straight back into Scheduler::ScheduleRound. The source's caller thread
// owns it.
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
  uint64_t Count(size_t channel) const;
  void Clear(size_t channel);
  void ClearAll();

 private:
  absl::Span<const Region> regions_;
  std::vector<std::vector<std::unique_ptr<DirtyBitmap>>> bitmaps_;
  std::vector<std::vector<DirtyBitmap*>> ptrs_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_SENT_LEDGER_H_
