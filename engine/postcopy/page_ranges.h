// Page sets as ranges, for the post-copy switch: the source turns the
// pages the destination lacks (a DirtyBitmap: set = not held there) into
// the canonical ranges proto/postcopy.h sends, and the destination turns
// received ranges back into a bitmap of pages it awaits.
//
// Canonical ranges (what every function here returns and what the wire
// demands): count >= 1, ascending, at least one page between neighbours,
// inside the bitmap. A run of set bits is never split, so a scan that
// stops after max_ranges and resumes later yields the same ranges as one
// whole scan.
#ifndef RAMFERRY_ENGINE_POSTCOPY_PAGE_RANGES_H_
#define RAMFERRY_ENGINE_POSTCOPY_PAGE_RANGES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "proto/postcopy.h"
#include "ramferry/dirty_bitmap.h"

namespace ramferry::engine {

using proto::PageRange;

struct RangeScan {
  std::vector<PageRange> ranges;
  // Where the next scan resumes: past the last range returned (or the
  // bitmap's end).
  uint64_t next_page = 0;
  // No set bit at or after next_page: the set is complete.
  bool done = false;
};

// The runs of set bits of `bitmap` from `from_page` on, at most
// `max_ranges` (>= 1) of them. Reads without taking (PeekWord): the
// bitmap is left as it is. Call it with the writers stopped (at the switch
// the workload is paused): a bit set during the scan may or may not be
// seen, like any bit set after it.
RangeScan ScanRanges(const DirtyBitmap& bitmap, uint64_t from_page,
                     size_t max_ranges);

// Every run of set bits of `bitmap`.
std::vector<PageRange> RangesFromBitmap(const DirtyBitmap& bitmap);

// Sets every page of `ranges` in `bitmap`; pages past its end are ignored.
void MarkRanges(absl::Span<const PageRange> ranges, DirtyBitmap& bitmap);

// Pages in `ranges` (canonical, so none counted twice).
uint64_t CountPages(absl::Span<const PageRange> ranges);

// Whether canonical `ranges` hold `page` (a binary search).
bool ContainsPage(absl::Span<const PageRange> ranges, uint64_t page);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_POSTCOPY_PAGE_RANGES_H_
