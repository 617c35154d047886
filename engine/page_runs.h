// Page offsets -> iovecs, merging pages that are adjacent in memory, so a
// run of dirty pages costs one span in a send or a readv. Each span comes
// with the region offset of its first page, which is what the digests,
// the zero-page bitmap and a region's file go by.
#ifndef RAMFERRY_ENGINE_PAGE_RUNS_H_
#define RAMFERRY_ENGINE_PAGE_RUNS_H_

#include <sys/uio.h>

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "proto/packet.h"
#include "ramferry/region.h"

namespace ramferry::engine {

namespace internal {

// Spans over the non-zero pages of `offsets`, entry i at address_of(i),
// merging neighbours that are adjacent both in the region and in memory.
template <typename AddressOf>
void BuildRuns(uint32_t page_size, absl::Span<const uint64_t> offsets,
               AddressOf address_of, std::vector<iovec>* iov,
               std::vector<uint64_t>* run_offsets) {
  iov->clear();
  run_offsets->clear();
  for (size_t i = 0; i < offsets.size(); ++i) {
    const uint64_t off = offsets[i];
    // Zero pages and delta records carry no page bytes.
    if (!proto::IsWholePageEntry(off, page_size)) continue;
    uint8_t* at = address_of(i);
    if (!iov->empty() && run_offsets->back() + iov->back().iov_len == off &&
        static_cast<uint8_t*>(iov->back().iov_base) + iov->back().iov_len ==
            at) {
      iov->back().iov_len += page_size;
      continue;
    }
    iov->push_back({at, page_size});
    run_offsets->push_back(off);
  }
}

}  // namespace internal

// Fills `iov` (and `run_offsets`, the region offset of each span) for
// `offsets` within `region`, leaving out zero pages (entries that carry
// proto::kZeroPageFlag: their bytes are not in the payload) and delta
// records (proto::DeltaBytesOf). Offsets must already be validated.
inline void BuildPageRuns(const Region& region,
                          absl::Span<const uint64_t> offsets,
                          std::vector<iovec>* iov,
                          std::vector<uint64_t>* run_offsets) {
  auto* base = static_cast<uint8_t*>(region.base);
  internal::BuildRuns(
      region.page_size, offsets,
      [&](size_t i) { return base + proto::PageOffsetOf(offsets[i]); }, iov,
      run_offsets);
}

// The same for pages that are not in the region but back to back in
// `copy`, entry i of `offsets` at copy + i * page_size (zero pages
// included): spans of the copy, with the region offset of each.
inline void BuildCopyRuns(uint32_t page_size,
                          absl::Span<const uint64_t> offsets, uint8_t* copy,
                          std::vector<iovec>* iov,
                          std::vector<uint64_t>* run_offsets) {
  internal::BuildRuns(
      page_size, offsets, [&](size_t i) { return copy + i * page_size; }, iov,
      run_offsets);
}

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_PAGE_RUNS_H_
