// Page offsets -> iovecs, merging pages that are adjacent in memory, so a
// run of dirty pages costs one span in a send or a readv.
#ifndef RAMFERRY_ENGINE_PAGE_RUNS_H_
#define RAMFERRY_ENGINE_PAGE_RUNS_H_

#include <sys/uio.h>

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "proto/packet.h"
#include "ramferry/region.h"

namespace ramferry::engine {

// Fills `iov` (and `run_offsets`, the region offset of each span) for
// `offsets` within `region`, leaving out zero pages (entries that carry
// proto::kZeroPageFlag: their bytes are not in the payload). Offsets must
// already be validated.
inline void BuildPageRuns(const Region& region,
                          absl::Span<const uint64_t> offsets,
                          std::vector<iovec>* iov,
                          std::vector<uint64_t>* run_offsets) {
  iov->clear();
  run_offsets->clear();
  auto* base = static_cast<uint8_t*>(region.base);
  for (uint64_t off : offsets) {
    if (proto::IsZeroPageEntry(off)) continue;
    if (!iov->empty() && run_offsets->back() + iov->back().iov_len == off) {
      iov->back().iov_len += region.page_size;
      continue;
    }
    iov->push_back({base + off, region.page_size});
    run_offsets->push_back(off);
  }
}

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_PAGE_RUNS_H_
