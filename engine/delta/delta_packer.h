// One channel's delta encoding of a data packet (SessionOptions::delta):
// builds the packet's payload, whole pages then delta records
// (proto/packet.h), in a buffer of the channel's own, from the region's
// memory and the session's DeltaCache.
//
// A page the cache holds is refreshed against the memory
// (proto::RefreshCopy) and goes as a record of what changed, or whole where
// the record would not be under half a page; a page it lacks is copied into
// a slot and goes whole from that copy. Either way what goes on the wire is
// what the slot holds, never the live page, which the workload may be
// writing meanwhile: the next delta is against exactly what the
// destination got.
//
// Invariants: between Pack and Finish the packet's slots are pinned
// (DeltaCache); every Pack is followed by one Finish, which says whether
// the payload went out. The buffers hold one page and one packet's
// records, which are less than its pages (at most
// proto::kMaxDeltaPayloadBytes: the caller packs no more).
#ifndef RAMFERRY_ENGINE_DELTA_DELTA_PACKER_H_
#define RAMFERRY_ENGINE_DELTA_DELTA_PACKER_H_

#include <sys/uio.h>

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/delta/delta_cache.h"
#include "ramferry/region.h"

namespace ramferry::engine {

class DeltaPacker {
 public:
  explicit DeltaPacker(DeltaCache* cache);
  uint32_t page_size() const { return cache_->page_size(); }

  struct Packed {
    uint64_t payload_bytes = 0;  // whole pages, then records
    uint32_t delta_pages = 0;    // pages that went as records
    uint64_t record_bytes = 0;   // their records' bytes
    DeltaCache::PinCounts cache;
    // This thread's CPU time committing the cache slots the packet wrote
    // first (before it packed them): a cost paid once per slot.
    uint64_t fill_cpu_ns = 0;
  };
  // Packs a data packet of `region` (index `index` of the session's
  // regions) whose page entries are `entries`, zero pages flagged: the
  // entries of pages sent as records get their record's size
  // (proto::DeltaPageEntry), and the payload goes to `out`, which has room
  // for every page that is not zero, whole. `sent` and `sent_offsets` get,
  // for each such page, its bytes as the destination will hold them and
  // its region offset (what a digest of the sent pages reads).
  Packed Pack(const Region& region, uint32_t index,
              absl::Span<uint64_t> entries, uint8_t* out,
              std::vector<iovec>* sent, std::vector<uint64_t>* sent_offsets);
  // Ends the packet Pack began: `delivered` when its payload went to the
  // transport (sent by `channel` in `round`), else its copies are
  // forgotten.
  void Finish(bool delivered, uint32_t channel, uint64_t round);
  // Forgets the cached copies of `entries`' pages, a packet of `index`
  // sent without the cache.
  void Forget(const Region& region, uint32_t index,
              absl::Span<const uint64_t> entries);

 private:
  // Forgets the copies of `entries`' zero pages, pins a cache slot for
  // each other page (pins_, in entry order) and commits the fresh slots.
  Packed PinPages(uint32_t page_size, uint32_t index,
                  absl::Span<const uint64_t> entries);
  // Refreshes `copy` from `live` and appends their delta record to
  // records_ at `at`; its size, or 0 where the page should go whole.
  size_t AppendRecord(const uint8_t* live, uint8_t* copy, uint32_t page_size,
                      uint64_t at);

  DeltaCache* const cache_;
  std::vector<uint64_t> pages_;
  std::vector<DeltaCache::Pinned> pins_;
  std::vector<uint8_t> xor_;      // one page's XOR image
  std::vector<uint8_t> records_;  // the packet's records, before they follow
                                  // its whole pages
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_DELTA_DELTA_PACKER_H_
