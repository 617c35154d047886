// Turns a round's dirty pages into packet-sized batches (one region each)
// and hands each to the least-loaded channel ring.
#ifndef RAMFERRY_ENGINE_SCHEDULER_H_
#define RAMFERRY_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/command_ring.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/region.h"

namespace ramferry::engine {

class Scheduler {
 public:
  // Batches hold at most `packet_pages` pages (<= each ring's max_pages).
  Scheduler(absl::Span<CommandRing* const> rings,
            absl::Span<const Region> regions, uint32_t packet_pages);

  struct Scheduled {
    uint64_t pages = 0;
    uint64_t bytes = 0;
  };
  // Takes (and clears) every bit of `dirty` (one bitmap per region) and
  // queues WRITE commands for `round`. INVALID_ARGUMENT, with nothing
  // taken, if the bitmaps do not fit the regions; ABORTED if a ring was
  // aborted meanwhile.
  absl::StatusOr<Scheduled> ScheduleRound(absl::Span<DirtyBitmap* const> dirty,
                                          uint64_t round);

 private:
  CommandRing* LeastLoaded();

  std::vector<CommandRing*> rings_;
  absl::Span<const Region> regions_;
  uint32_t packet_pages_;
  size_t next_ = 0;  // where the least-loaded search starts: spreads ties
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_SCHEDULER_H_
