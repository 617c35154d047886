#include "engine/postcopy/page_ranges.h"

#include <algorithm>
#include <bit>

namespace ramferry::engine {
namespace {

// Word `w` of `bitmap` with the bits below `from_bit` cleared.
uint64_t WordFrom(const DirtyBitmap& bitmap, size_t w, unsigned from_bit) {
  const uint64_t word = bitmap.PeekWord(w);
  return from_bit == 0 ? word : word & (~uint64_t{0} << from_bit);
}

// The first set page at or after `page`, or bitmap.pages().
uint64_t NextSet(const DirtyBitmap& bitmap, uint64_t page) {
  const uint64_t pages = bitmap.pages();
  while (page < pages) {
    const uint64_t bits = WordFrom(bitmap, page / 64, page % 64);
    if (bits != 0) {
      return std::min(pages, page - page % 64 + std::countr_zero(bits));
    }
    page += 64 - page % 64;
  }
  return pages;
}

// The first clear page at or after `page`, or bitmap.pages().
uint64_t NextClear(const DirtyBitmap& bitmap, uint64_t page) {
  const uint64_t pages = bitmap.pages();
  while (page < pages) {
    // Bits below `page` are behind the search: read them as set.
    const unsigned bit = page % 64;
    uint64_t bits = bitmap.PeekWord(page / 64);
    if (bit != 0) bits |= (uint64_t{1} << bit) - 1;
    if (bits != ~uint64_t{0}) {
      return std::min(pages, page - bit + std::countr_one(bits));
    }
    page += 64 - bit;
  }
  return pages;
}

}  // namespace

RangeScan ScanRanges(const DirtyBitmap& bitmap, uint64_t from_page,
                     size_t max_ranges) {
  RangeScan scan;
  const uint64_t pages = bitmap.pages();
  uint64_t page = std::min(from_page, pages);
  max_ranges = std::max<size_t>(max_ranges, 1);
  while (scan.ranges.size() < max_ranges) {
    const uint64_t first = NextSet(bitmap, page);
    if (first >= pages) {
      page = pages;
      break;
    }
    const uint64_t end = NextClear(bitmap, first);
    scan.ranges.push_back({first, end - first});
    page = end;
  }
  scan.next_page = page;
  scan.done = NextSet(bitmap, page) >= pages;
  return scan;
}

std::vector<PageRange> RangesFromBitmap(const DirtyBitmap& bitmap) {
  return ScanRanges(bitmap, 0, bitmap.pages() / 2 + 1).ranges;
}

void MarkRanges(absl::Span<const PageRange> ranges, DirtyBitmap& bitmap) {
  // SetRange clips without computing first + count.
  for (const PageRange& r : ranges) bitmap.SetRange(r.first, r.count);
}

uint64_t CountPages(absl::Span<const PageRange> ranges) {
  uint64_t n = 0;
  for (const PageRange& r : ranges) n += r.count;
  return n;
}

bool ContainsPage(absl::Span<const PageRange> ranges, uint64_t page) {
  // The last range whose first is <= page.
  auto it = std::upper_bound(
      ranges.begin(), ranges.end(), page,
      [](uint64_t p, const PageRange& r) { return p < r.first; });
  if (it == ranges.begin()) return false;
  --it;
  return page - it->first < it->count;
}

}  // namespace ramferry::engine
