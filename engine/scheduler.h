// Turns a round's dirty pages into packet-sized batches (one region each)
// and hands each to the least-loaded channel ring. A ring that was aborted
// (its channel died) gets no more batches; the round fails only when every
// ring is aborted.
#ifndef RAMFERRY_ENGINE_SCHEDULER_H_
#define RAMFERRY_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/command_ring.h"
#include "engine/sent_ledger.h"
#include "proto/packet.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/region.h"

namespace ramferry::engine {

class Scheduler {
 public:
  // Batches hold at most `packet_pages` pages (<= each ring's max_pages)
  // and, with `max_batch_bytes` (0: no bound), at most that many bytes of
  // pages, but at least one page: what a channel copies a payload into
  // when it seals it stays bounded whatever the page size. `after_commit(i)`,
  // if set, runs after each command pushed to ring i (single-thread mode
  // drains the ring there). `ledger`, if set, records which ring got which
  // pages.
  Scheduler(absl::Span<CommandRing* const> rings,
            absl::Span<const Region> regions, uint32_t packet_pages,
            std::function<absl::Status(size_t)> after_commit = {},
            SentLedger* ledger = nullptr, uint64_t max_batch_bytes = 0);

  struct Scheduled {
    uint64_t pages = 0;  // every page the round covers, zero ranges too
    uint64_t bytes = 0;
    uint64_t zero_range_pages = 0;  // of `pages`, those in zero ranges
  };
  // Takes (and clears) every bit of `dirty` (one bitmap per region) and
  // queues WRITE commands for `round`. `zero_ranges`, if not empty, has
  // one list per region of byte ranges that read as zero (sorted,
  // disjoint, page-aligned, inside the region): their dirty pages are
  // taken first and queued as ZERO_RANGES commands (at most packet_pages/2
  // ranges each), so no byte of them is read or sent. INVALID_ARGUMENT,
  // with nothing taken, if the bitmaps or ranges do not fit the regions;
  // ABORTED once every ring is aborted. Zero ranges are not recorded in
  // the ledger: a session that re-sends a lost channel's batches must not
  // pass any.
  absl::StatusOr<Scheduled> ScheduleRound(
      absl::Span<DirtyBitmap* const> dirty, uint64_t round,
      absl::Span<const std::vector<proto::ZeroRange>> zero_ranges = {});

 private:
  // The live ring with the smallest backlog; rings_.size() if none lives.
  size_t LeastLoaded();
  // A free slot of the least-loaded live ring, filled in as an empty
  // command of `type`; nullptr once every ring is aborted.
  Command* BeginCommand(CommandType type, uint32_t region, uint64_t round,
                        size_t* ring);
  // Takes region r's dirty pages inside `ranges` and queues them as
  // ZERO_RANGES commands; returns the pages taken.
  absl::StatusOr<uint64_t> ScheduleZeroRanges(
      uint32_t r, DirtyBitmap& bits, absl::Span<const proto::ZeroRange> ranges,
      uint64_t round);
  absl::Status Commit(size_t ring, const Command& batch);
  // ScheduleRound's arguments: a bitmap a region, of its size; zero
  // ranges sorted, disjoint and page-aligned inside their region.
  absl::Status CheckRound(
      absl::Span<DirtyBitmap* const> dirty,
      absl::Span<const std::vector<proto::ZeroRange>> zero_ranges) const;

  std::vector<CommandRing*> rings_;
  absl::Span<const Region> regions_;
  uint32_t packet_pages_;
  uint64_t max_batch_bytes_;
  size_t next_ = 0;  // where the least-loaded search starts: spreads ties
  std::function<absl::Status(size_t)> after_commit_;
  SentLedger* const ledger_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_SCHEDULER_H_
