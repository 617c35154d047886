// Pages moved through the file a region maps (Region::fd) instead of
// through this process's page tables: pread into a channel's buffer on the
// source, pwrite from it on the destination. The buffer is the channel's
// own and stays mapped, so the kernel copies to or from memory whose
// page-table entries are warm, and the region's pages are reached through
// the page cache alone. Region::fd says why that matters.
//
// Only long runs are worth it: each run is a system call, where a page
// reached through a warm mapping costs none. A packet goes through the file
// when its runs average at least kMinFileRunPages pages (round 0 and most
// of a full copy), and through the mapping otherwise (the scattered pages
// of later rounds, which the mapping has mostly seen by then).
#ifndef RAMFERRY_ENGINE_PAGES_REGION_FILE_H_
#define RAMFERRY_ENGINE_PAGES_REGION_FILE_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ramferry/region.h"

namespace ramferry::engine {

inline constexpr uint64_t kMinFileRunPages = 4;
// The most a packet moves through the file: the channel's buffer holds a
// whole payload, and a bigger one (huge pages, a large packet_pages) goes
// through the mapping rather than grow it.
inline constexpr uint64_t kMaxFilePayloadBytes = 8u << 20;

// Whether a packet of `pages` pages in `runs` runs of `region`, `bytes` in
// all, goes through the region's file.
inline bool ThroughFile(const Region& region, size_t runs, uint64_t pages,
                        uint64_t bytes) {
  return region.fd >= 0 && runs != 0 && bytes <= kMaxFilePayloadBytes &&
         pages >= runs * kMinFileRunPages;
}

// Checks Region::fd: a regular file, not on hugetlbfs, long enough, opened
// for reading (and for writing where `writable`), and the file that maps
// [base, base + length) shared at fd_offset, by /proc/self/maps (device,
// inode and offset of every mapping the range spans). A wrong descriptor
// would move pages to or from some other memory, so it is refused here.
absl::Status CheckRegionFile(const Region& region, bool writable);

// Reads `runs` of the region's pages (region offsets `run_offsets[i]`,
// runs[i].iov_len bytes each; iov_base is not used) from its file into
// `dst`, back to back.
absl::Status ReadRuns(const Region& region,
                      absl::Span<const uint64_t> run_offsets,
                      absl::Span<const iovec> runs, uint8_t* dst);
// The other way: writes `src`, back to back, to those runs of the file.
absl::Status WriteRuns(const Region& region,
                       absl::Span<const uint64_t> run_offsets,
                       absl::Span<const iovec> runs, const uint8_t* src);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_PAGES_REGION_FILE_H_
