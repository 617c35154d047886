#include "engine/delta/delta_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/errno_status.h"
#include "proto/page_delta.h"

namespace ramferry::engine {

DeltaPlan PlanDeltaCache(absl::Span<const Region> regions,
                         uint64_t cache_bytes) {
  struct Size {
    uint64_t bytes = 0;
    std::vector<uint32_t> ids;
  };
  std::map<uint32_t, Size> by_page_size;
  for (const Region& r : regions) {
    Size& s = by_page_size[r.page_size];
    s.bytes += r.length;
    s.ids.push_back(r.id);
  }
  DeltaPlan plan;
  uint64_t most = 0;
  for (const auto& [page_size, size] : by_page_size) {
    if (page_size <= proto::kMaxDeltaPayloadBytes && page_size <= cache_bytes &&
        size.bytes > most) {
      plan.page_size = page_size;
      most = size.bytes;
    }
  }
  for (const auto& [page_size, size] : by_page_size) {
    if (page_size == plan.page_size) continue;
    const std::string which = absl::StrFormat(
        "region%s %s (%d-byte pages)", size.ids.size() > 1 ? "s" : "",
        absl::StrJoin(size.ids, ", "), page_size);
    if (page_size > proto::kMaxDeltaPayloadBytes) {
      plan.whole.push_back(absl::StrFormat(
          "%s: pages go whole, deltas go for pages of at most %d bytes (a "
          "delta packet is built and read whole)",
          which, proto::kMaxDeltaPayloadBytes));
    } else if (page_size > cache_bytes) {
      plan.whole.push_back(absl::StrFormat(
          "%s: pages go whole, the delta cache of %d bytes holds none; "
          "give delta_cache_bytes (--delta-cache) at least %d",
          which, cache_bytes, page_size));
    } else {
      plan.whole.push_back(absl::StrFormat(
          "%s: pages go whole, the delta cache is for the %d-byte pages of "
          "most of the memory",
          which, plan.page_size));
    }
  }
  return plan;
}

absl::StatusOr<std::unique_ptr<DeltaCache>> DeltaCache::Create(
    uint64_t bytes, uint32_t page_size) {
  const uint64_t slots = page_size == 0 ? 0 : bytes / page_size;
  if (slots == 0 || slots >= kNoSlot ||
      page_size > proto::kMaxDeltaPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "delta cache of %d bytes for %d-byte pages: want room for 1 to %d "
        "pages of at most %d bytes",
        bytes, page_size, kNoSlot - 1, proto::kMaxDeltaPayloadBytes));
  }
  const uint64_t mapped = slots * page_size;
  // Reserved, not committed: the pages of slots never used cost nothing.
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return base::ErrnoStatus(
        errno, absl::StrFormat("mapping a %d-byte delta cache (lower "
                               "--delta-cache)",
                               mapped));
  }
  // Not MADV_HUGEPAGE: with THP defrag at "madvise" (Debian's default) a
  // fault may compact memory synchronously, stalling the channel that
  // fills a slot for far longer than the 4 KiB faults it would save.
  return std::unique_ptr<DeltaCache>(
      new DeltaCache(static_cast<uint8_t*>(p), mapped,
                     static_cast<uint32_t>(slots), page_size));
}

DeltaCache::DeltaCache(uint8_t* memory, uint64_t mapped, uint32_t slots,
                       uint32_t page_size)
    : memory_(memory),
      mapped_(mapped),
      slots_(slots),
      page_size_(page_size),
      key_(slots),
      channel_(slots),
      round_(slots),
      prev_(slots, kNoSlot),
      next_(slots, kNoSlot),
      state_(slots, State::kFree) {}

DeltaCache::~DeltaCache() { munmap(memory_, mapped_); }

size_t DeltaCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size();
}

void DeltaCache::Link(uint32_t slot) {
  prev_[slot] = kNoSlot;
  next_[slot] = head_;
  if (head_ != kNoSlot) prev_[head_] = slot;
  head_ = slot;
  if (tail_ == kNoSlot) tail_ = slot;
}

void DeltaCache::Unlink(uint32_t slot) {
  if (prev_[slot] != kNoSlot) {
    next_[prev_[slot]] = next_[slot];
  } else {
    head_ = next_[slot];
  }
  if (next_[slot] != kNoSlot) {
    prev_[next_[slot]] = prev_[slot];
  } else {
    tail_ = prev_[slot];
  }
  prev_[slot] = next_[slot] = kNoSlot;
}

uint32_t DeltaCache::Take(bool* evicted) {
  *evicted = false;
  if (!free_.empty()) {
    const uint32_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  if (unused_ < slots_) return unused_++;
  // Pinned slots are off the list, so the tail is always evictable.
  const uint32_t slot = tail_;
  if (slot == kNoSlot) return kNoSlot;
  Unlink(slot);
  index_.erase(key_[slot]);
  state_[slot] = State::kFree;
  *evicted = true;
  return slot;
}

DeltaCache::PinCounts DeltaCache::Pin(uint32_t region,
                                      absl::Span<const uint64_t> pages,
                                      absl::Span<Pinned> out) {
  PinCounts counts;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < pages.size(); ++i) {
    const uint64_t key = Key(region, pages[i]);
    auto it = index_.find(key);
    if (it != index_.end()) {
      const uint32_t slot = it->second;
      Unlink(slot);
      state_[slot] = State::kPinned;
      out[i] = {slot, true};
      ++counts.hits;
      continue;
    }
    ++counts.misses;
    bool evicted = false;
    // Under the lock free_ only shrinks, so this call's fresh slots are
    // consecutive.
    const bool fresh = free_.empty() && unused_ < slots_;
    const uint32_t slot = Take(&evicted);
    if (fresh) {
      if (counts.fresh++ == 0) counts.first_fresh = slot;
    }
    counts.evictions += evicted ? 1 : 0;
    out[i] = {slot, false};
    if (slot == kNoSlot) continue;
    state_[slot] = State::kPinned;
    key_[slot] = key;
    index_[key] = slot;
  }
  return counts;
}

void DeltaCache::Unpin(absl::Span<const Pinned> pinned, bool keep,
                       uint32_t channel, uint64_t round) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Pinned& p : pinned) {
    const uint32_t slot = p.slot;
    if (slot == kNoSlot) continue;
    if (keep && state_[slot] == State::kPinned) {
      state_[slot] = State::kListed;
      channel_[slot] = channel;
      round_[slot] = round;
      Link(slot);
      continue;
    }
    if (state_[slot] == State::kPinned) index_.erase(key_[slot]);
    state_[slot] = State::kFree;
    free_.push_back(slot);
  }
}

void DeltaCache::Forget(uint32_t region, absl::Span<const uint64_t> pages) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.empty()) return;
  for (uint64_t page : pages) {
    auto it = index_.find(Key(region, page));
    if (it == index_.end()) continue;
    const uint32_t slot = it->second;
    index_.erase(it);
    // A pinned slot is its channel's until it unpins it.
    if (state_[slot] == State::kPinned) {
      state_[slot] = State::kPinnedForgotten;
      continue;
    }
    Unlink(slot);
    state_[slot] = State::kFree;
    free_.push_back(slot);
  }
}

void DeltaCache::ForgetSentBy(uint32_t channel, uint64_t round) {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t slot = 0; slot < unused_; ++slot) {
    if (state_[slot] != State::kListed || channel_[slot] != channel ||
        round_[slot] < round) {
      continue;
    }
    index_.erase(key_[slot]);
    Unlink(slot);
    state_[slot] = State::kFree;
    free_.push_back(slot);
  }
}

}  // namespace ramferry::engine
