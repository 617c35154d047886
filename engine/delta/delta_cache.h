// The source's copies of pages as last sent, for delta encoding
// (SessionOptions::delta): a fixed pool of page-sized slots, one per
// cached page, the least recently sent evicted first, shared by every
// channel of the session.
//
// A channel pins the slots of a packet's pages for as long as it reads
// and writes them, with one lock taken per packet, not per page: a pinned
// slot is never evicted, so a slot's bytes are the pinning channel's
// alone until it unpins them. Copies are refreshed by the channel
// (proto::RefreshCopy), never by the cache.
//
// Invariants: a (region, page) has at most one slot; a slot's bytes equal
// what the destination holds for its page whenever no channel has it
// pinned, as long as every send of a cached page goes through the cache
// (Pin and Unpin) or forgets it (Forget). The memory is reserved, not
// committed: a slot costs memory once it is first written.
#ifndef RAMFERRY_ENGINE_DELTA_DELTA_CACHE_H_
#define RAMFERRY_ENGINE_DELTA_DELTA_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ramferry/region.h"

namespace ramferry::engine {

// Which page size a session's one delta cache of `cache_bytes` is for. A
// page size may take deltas where its pages are at most
// proto::kMaxDeltaPayloadBytes (a delta packet is built whole on the
// source and its records read aside on the destination, both bounded so)
// and the cache holds at least one of them; of those, the one whose
// regions cover the most memory. Regions of every other page size send
// their pages whole: `whole` says which and why, a line per page size
// (with the fix where there is one). page_size 0: no region can take
// deltas.
struct DeltaPlan {
  uint32_t page_size = 0;
  std::vector<std::string> whole;
};
DeltaPlan PlanDeltaCache(absl::Span<const Region> regions,
                         uint64_t cache_bytes);

class DeltaCache {
 public:
  // `bytes` of copies of `page_size`-byte pages (at least one slot; pages
  // of at most proto::kMaxDeltaPayloadBytes).
  static absl::StatusOr<std::unique_ptr<DeltaCache>> Create(uint64_t bytes,
                                                            uint32_t page_size);
  ~DeltaCache();
  DeltaCache(const DeltaCache&) = delete;
  DeltaCache& operator=(const DeltaCache&) = delete;

  static constexpr uint32_t kNoSlot = UINT32_MAX;
  struct Pinned {
    uint32_t slot = kNoSlot;  // kNoSlot: every slot was pinned
    bool hit = false;         // the slot holds the page as last sent
  };
  struct PinCounts {
    uint64_t hits = 0, misses = 0, evictions = 0;
    // Misses given a slot never written before (its memory not committed
    // yet): slots first_fresh .. first_fresh + fresh - 1, consecutive.
    uint32_t fresh = 0;
    uint32_t first_fresh = kNoSlot;
  };

  // Pins a slot for each of `pages` (page indexes of region `region`,
  // distinct) into `out`: its copy on a hit; on a miss a slot taken from
  // the free ones or, failing those, from the least recently sent page,
  // whose copy is forgotten, its bytes left for the caller to overwrite.
  PinCounts Pin(uint32_t region, absl::Span<const uint64_t> pages,
                absl::Span<Pinned> out);
  // Releases slots Pin gave (kNoSlot entries are skipped): their pages,
  // sent by `channel` in `round`, are now the most recently sent. With
  // `keep` false their pages are forgotten instead (the copies may not be
  // what the destination holds: the send failed).
  void Unpin(absl::Span<const Pinned> pinned, bool keep, uint32_t channel,
             uint64_t round);
  // Forgets the copies `channel` sent in `round` or later: that channel
  // was lost, so the destination may lack them, and the batches that
  // carried them go again, whole.
  void ForgetSentBy(uint32_t channel, uint64_t round);
  // Forgets the copies of `pages` of `region`, where there are any: they
  // went by another way, so their copies are stale.
  void Forget(uint32_t region, absl::Span<const uint64_t> pages);

  uint8_t* slot_data(uint32_t slot) const {
    return memory_ + uint64_t{slot} * page_size_;
  }
  uint32_t page_size() const { return page_size_; }
  uint32_t slots() const { return slots_; }
  // Pages cached now.
  size_t size() const;

 private:
  DeltaCache(uint8_t* memory, uint64_t mapped, uint32_t slots,
             uint32_t page_size);
  static uint64_t Key(uint32_t region, uint64_t page) {
    return uint64_t{region} << 48 | page;
  }
  // The LRU list, by slot: head_ is the most recently sent. Need mu_.
  void Link(uint32_t slot);
  void Unlink(uint32_t slot);
  // A slot for a new page: a free one, else the LRU tail's (evicted);
  // kNoSlot when all are pinned. Needs mu_.
  uint32_t Take(bool* evicted);

  uint8_t* const memory_;
  const uint64_t mapped_;
  const uint32_t slots_;
  const uint32_t page_size_;

  mutable std::mutex mu_;
  absl::flat_hash_map<uint64_t, uint32_t> index_;  // key -> slot
  std::vector<uint64_t> key_;                      // slot -> key, for eviction
  // Who last sent each slot's copy, and in which round.
  std::vector<uint32_t> channel_;
  std::vector<uint64_t> round_;
  std::vector<uint32_t> prev_, next_;
  // Pinned slots are off the LRU list; a pinned slot whose page was
  // forgotten meanwhile goes free at its Unpin.
  enum class State : uint8_t { kFree, kListed, kPinned, kPinnedForgotten };
  std::vector<State> state_;
  uint32_t head_ = kNoSlot, tail_ = kNoSlot;
  uint32_t unused_ = 0;  // slots [unused_, slots_) were never given out
  std::vector<uint32_t> free_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_DELTA_DELTA_CACHE_H_
