#include "engine/zero_pages.h"

#include <cstring>

#include "channels/zero_page.h"

namespace ramferry::engine {

ZeroPages::ZeroPages(absl::Span<const Region> regions) {
  regions_.reserve(regions.size());
  for (const Region& r : regions) {
    Tracked t{r, nullptr};
    if (r.reads_as_zero) t.data = std::make_unique<DirtyBitmap>(r.page_count());
    regions_.push_back(std::move(t));
  }
}

void ZeroPages::NoteData(size_t index, absl::Span<const iovec> runs) {
  const Tracked& t = regions_[index];
  if (t.data == nullptr) return;
  const auto* base = static_cast<const uint8_t*>(t.region.base);
  for (const iovec& run : runs) {
    const auto* p = static_cast<const uint8_t*>(run.iov_base);
    t.data->SetRange(static_cast<uint64_t>(p - base) / t.region.page_size,
                     run.iov_len / t.region.page_size);
  }
}

ZeroPages::Applied ZeroPages::ZeroUnknown(const Region& r, uint64_t first,
                                          uint64_t count) {
  Applied a;
  for (uint64_t p = first; p < first + count; ++p) {
    uint8_t* page = r.page(p);
    if (channels::IsAllZero(page, r.page_size)) {
      ++a.skipped;
    } else {
      std::memset(page, 0, r.page_size);
      ++a.written;
    }
  }
  return a;
}

ZeroPages::Applied ZeroPages::Zero(size_t index, uint64_t first,
                                   uint64_t count) {
  const Tracked& t = regions_[index];
  if (t.data == nullptr) return ZeroUnknown(t.region, first, count);
  Applied a;
  const uint64_t end = first + count;
  uint64_t p = first;
  while (p < end) {
    // A whole word of pages no data landed on is skipped at once: a large
    // zero range on fresh memory costs a word read per 64 pages.
    if (p % 64 == 0 && end - p >= 64 && t.data->PeekWord(p / 64) == 0) {
      a.skipped += 64;
      p += 64;
      continue;
    }
    if (t.data->Test(p)) {
      const Applied one = ZeroUnknown(t.region, p, 1);
      a.written += one.written;
      a.skipped += one.skipped;
    } else {
      ++a.skipped;
    }
    ++p;
  }
  return a;
}

}  // namespace ramferry::engine
