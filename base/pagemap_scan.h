// The PAGEMAP_SCAN ioctl on /proc/<pid>/pagemap (Linux 6.7+), declared
// here because Debian 12's kernel headers (6.1) predate it. The values are
// the kernel's ABI (include/uapi/linux/fs.h) and cannot change; a kernel
// without the ioctl answers ENOTTY (or EINVAL for a struct size it does not
// know), which every caller must treat as "not available", not as a bug.
#ifndef RAMFERRY_BASE_PAGEMAP_SCAN_H_
#define RAMFERRY_BASE_PAGEMAP_SCAN_H_

#include <sys/ioctl.h>

#include <cstdint>

namespace ramferry::base {

// One run of pages with the same categories (after return_mask), as the
// kernel writes them into the output vector: [start, end) addresses.
struct PageRegion {
  uint64_t start, end, categories;
};
// struct pm_scan_arg; the kernel checks `size` against its own.
struct PmScanArg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages,
      category_inverted, category_mask, category_anyof_mask, return_mask;
};
static_assert(sizeof(PageRegion) == 24 && sizeof(PmScanArg) == 96,
              "layout is the kernel ABI");

inline constexpr unsigned long kPagemapScan = _IOWR('f', 16, PmScanArg);

// flags. Without kScanWpMatching a scan only reads page tables.
inline constexpr uint64_t kScanWpMatching = 1ull << 0;
inline constexpr uint64_t kScanCheckWpAsync = 1ull << 1;

// Page categories. Filtering is (categories ^ category_inverted) &
// category_mask == category_mask, then (if set) any of category_anyof_mask;
// the vector gets categories & return_mask (not inverted). Only bits 0..6
// exist on every kernel with the ioctl: a mask naming a newer bit (such as
// PAGE_IS_GUARD) is EINVAL on 6.7.
inline constexpr uint64_t kPageIsWpAllowed = 1ull << 0;
inline constexpr uint64_t kPageIsWritten = 1ull << 1;
inline constexpr uint64_t kPageIsFile = 1ull << 2;
inline constexpr uint64_t kPageIsPresent = 1ull << 3;
inline constexpr uint64_t kPageIsSwapped = 1ull << 4;
inline constexpr uint64_t kPageIsPfnZero = 1ull << 5;
inline constexpr uint64_t kPageIsHuge = 1ull << 6;

}  // namespace ramferry::base

#endif  // RAMFERRY_BASE_PAGEMAP_SCAN_H_
