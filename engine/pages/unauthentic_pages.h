// Destination, sealed stream: the pages that a payload read in place wrote
// before its tag was checked, and whose tag never checked out (it failed,
// or the read was cut: a lost channel, a reset, a shutdown). Such a page
// holds bytes nobody vouched for until an authentic copy lands over it.
//
// A legitimate packet cut on a lost channel is re-sent (its batch was not
// confirmed), so its pages are cleared again before the last round is
// confirmed; a forged header names pages nobody re-sends. So the session
// may end, or go live (post-copy's switch), only with the set empty, and
// verification answers a page in the set as not matching.
//
// Marks race with landings on other channels (a forged header may name a
// page another channel is writing). A landing clears only the marks made
// before its read began (Epoch() taken then): a mark made after that may
// cover bytes written over the landing, so it stays.
//
// Thread-safe: channel threads mark and clear, the session's thread reads.
// Clearing is one relaxed load while the set is empty (the common case: it
// runs for every landed packet).
#ifndef RAMFERRY_ENGINE_PAGES_UNAUTHENTIC_PAGES_H_
#define RAMFERRY_ENGINE_PAGES_UNAUTHENTIC_PAGES_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ramferry/region.h"

namespace ramferry::engine {

class UnauthenticPages {
 public:
  // Pages of the regions, by their index in `regions`.
  explicit UnauthenticPages(absl::Span<const Region> regions);

  // Taken before a payload's read begins, for Clear.
  uint64_t Epoch() const { return epoch_.load(std::memory_order_seq_cst); }
  // Pages [first, first + count) of region `index` (clipped to it) were
  // written by a payload no tag vouched for. After the write: the read
  // that wrote them has returned.
  void Mark(size_t index, uint64_t first, uint64_t count);
  // An authentic copy (or zero page), read or written after `epoch` was
  // taken, landed on them: the marks made before then go.
  void Clear(size_t index, uint64_t first, uint64_t count, uint64_t epoch);

  bool Test(size_t index, uint64_t page) const;
  uint64_t count() const { return count_.load(std::memory_order_acquire); }
  // OK while empty; else FAILED_PRECONDITION naming the first such page,
  // `when` saying what may not happen with it ("the session cannot end").
  absl::Status CheckEmpty(absl::string_view when) const;

 private:
  static uint64_t Key(size_t index, uint64_t page) {
    return (uint64_t{static_cast<uint32_t>(index)} << 40) | page;
  }

  std::vector<uint32_t> region_ids_;
  std::vector<uint64_t> page_counts_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<uint64_t> count_{0};
  mutable std::mutex mu_;
  // Marked page -> the epoch its mark made. Guarded by mu_.
  absl::flat_hash_map<uint64_t, uint64_t> marked_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_PAGES_UNAUTHENTIC_PAGES_H_
