#include "engine/pages/zero_pages.h"

#include <algorithm>
#include <cstring>

#include "base/status_macros.h"
#include "base/zero_page.h"
#include "engine/pages/region_file.h"

namespace ramferry::engine {

ZeroPages::ZeroPages(absl::Span<const Region> regions) {
  regions_.reserve(regions.size());
  for (const Region& r : regions) {
    Tracked t{r, nullptr};
    if (r.reads_as_zero) t.data = std::make_unique<DirtyBitmap>(r.page_count());
    regions_.push_back(std::move(t));
  }
}

void ZeroPages::NoteData(size_t index, absl::Span<const uint64_t> run_offsets,
                         absl::Span<const iovec> runs) {
  const Tracked& t = regions_[index];
  if (t.data == nullptr) return;
  for (size_t i = 0; i < runs.size(); ++i) {
    t.data->SetRange(run_offsets[i] / t.region.page_size,
                     runs[i].iov_len / t.region.page_size);
  }
}

absl::StatusOr<ZeroPages::Applied> ZeroPages::ZeroUnknown(const Region& r,
                                                          uint64_t first,
                                                          uint64_t count) {
  if (r.fd >= 0 && count >= kMinFileRunPages) {
    return ZeroUnknownInFile(r, first, count);
  }
  Applied a;
  for (uint64_t p = first; p < first + count; ++p) {
    uint8_t* page = r.page(p);
    if (base::IsAllZero(page, r.page_size)) {
      ++a.skipped;
    } else {
      std::memset(page, 0, r.page_size);
      ++a.written;
    }
  }
  return a;
}

absl::StatusOr<ZeroPages::Applied> ZeroPages::ZeroUnknownInFile(
    const Region& r, uint64_t first, uint64_t count) {
  // A slice at a time is read, and each stretch of it that is not zero
  // already is written back zeroed, from the same buffer. One per channel
  // thread, kept: zero runs come often on memory that has many.
  constexpr uint64_t kSliceBytes = 256u << 10;
  thread_local std::vector<uint8_t> slice;
  const uint64_t slice_pages = std::max<uint64_t>(1, kSliceBytes / r.page_size);
  slice.resize(slice_pages * r.page_size);
  Applied a;
  for (uint64_t at = first; at < first + count; at += slice_pages) {
    const uint64_t n = std::min(slice_pages, first + count - at);
    const uint64_t offset = at * r.page_size;
    const iovec whole{nullptr, n * r.page_size};
    if (absl::Status s = ReadRuns(r, {&offset, 1}, {&whole, 1}, slice.data());
        !s.ok()) {
      return s;
    }
    uint64_t run = 0;  // pages not zero, ending at page i
    for (uint64_t i = 0; i <= n; ++i) {
      const bool dirty =
          i < n &&
          !base::IsAllZero(slice.data() + i * r.page_size, r.page_size);
      if (dirty) {
        std::memset(slice.data() + i * r.page_size, 0, r.page_size);
        ++run;
        continue;
      }
      if (i < n) ++a.skipped;
      if (run == 0) continue;
      const uint64_t run_offset = (at + i - run) * r.page_size;
      const iovec zeros{nullptr, run * r.page_size};
      if (absl::Status s = WriteRuns(r, {&run_offset, 1}, {&zeros, 1},
                                     slice.data() + (i - run) * r.page_size);
          !s.ok()) {
        return s;
      }
      a.written += run;
      run = 0;
    }
  }
  return a;
}

absl::StatusOr<ZeroPages::Applied> ZeroPages::Zero(size_t index, uint64_t first,
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
      RAMFERRY_ASSIGN_OR_RETURN(Applied one, ZeroUnknown(t.region, p, 1));
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
