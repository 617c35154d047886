// Destination, with delta-encoded pages (kFeatureDeltaPages): the pages
// that hold what the source sent (a page, a zero page, a zero range, a
// delta applied). A delta is a change to a page the destination holds, so
// one for a page outside the set is refused: applied to whatever the
// region read as, it would leave bytes the source never had, and nothing
// would ever be re-sent over them.
//
// Thread-safe without a lock: channel threads set pages as they land and
// test them before applying a delta. A page lands in round k before any
// channel applies round k + 1 (the round barrier orders them), so a delta
// always finds the page its round depends on.
#ifndef RAMFERRY_ENGINE_PAGES_HELD_PAGES_H_
#define RAMFERRY_ENGINE_PAGES_HELD_PAGES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "engine/pages/atomic_page_set.h"
#include "ramferry/region.h"

namespace ramferry::engine {

class HeldPages {
 public:
  // Pages of the regions, by their index in `regions`.
  explicit HeldPages(absl::Span<const Region> regions) {
    for (const Region& r : regions) {
      sets_.push_back(std::make_unique<AtomicPageSet>(r.page_count()));
    }
  }
  void Set(size_t index, uint64_t first, uint64_t count) {
    sets_[index]->SetRange(first, count);
  }
  bool Test(size_t index, uint64_t page) const {
    return sets_[index]->Test(page);
  }

 private:
  std::vector<std::unique_ptr<AtomicPageSet>> sets_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_PAGES_HELD_PAGES_H_
