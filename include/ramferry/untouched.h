// Pages of a region that hold nothing yet: the kernel knows them to read
// as zero without anyone reading them, so a first round can skip them
// (neither read, which would fault them in, nor sent), and a caller about
// to fault a region in can leave a file's holes alone.
#ifndef RAMFERRY_UNTOUCHED_H_
#define RAMFERRY_UNTOUCHED_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ramferry/region.h"

namespace ramferry {

// A byte range inside a region: [offset, offset + length).
struct ByteRange {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t end() const { return offset + length; }
  bool operator==(const ByteRange&) const = default;
};

// The whole pages (of region.page_size) of `region`, a range of THIS
// process's address space, that the kernel says hold nothing yet and read
// as zero. Offsets are from region.base. Sorted, merged (no two ranges
// touch), each aligned to region.page_size; a page is reported only if all
// of it qualifies, so a 2 MiB tracking page with one written 4 KiB piece
// is not. (The kernel answers per host page, 4 KiB on x86; a tracking page
// smaller than that qualifies when the host page holding it does.)
//
// Never reports a page that holds data; where the kernel cannot say, it
// reports nothing. Per VMA of /proc/self/maps overlapping the region:
//  - private anonymous (including [heap], [stack], [anon:...]): a 4 KiB
//    piece qualifies when PAGEMAP_SCAN finds it neither present nor
//    swapped, or present and mapped to the shared zero page (a read fault,
//    MADV_POPULATE_READ; under THP the huge zero page, which 6.18 reports
//    as PAGE_IS_PFNZERO too). Swapped, migrating and marker entries
//    (uffd-wp, guard) are not "none": never reported.
//  - shared mapping of a regular file (tmpfs, /dev/shm, memfd, SysV shm,
//    MAP_SHARED|MAP_ANONYMOUS): the holes SEEK_DATA/SEEK_HOLE find in the
//    mapped file range, up to EOF (a page past EOF raises SIGBUS, it does
//    not read zero). The file, not our page tables, is the truth here:
//    data written with write(2), or swapped-out shmem, is not mapped in
//    this process, so PAGEMAP_SCAN would call it absent. Note that a read
//    fault on a shmem hole allocates a zeroed page: it is data from then on.
//  - anything else: nothing (a private file mapping's absent page reads
//    the file; device and VM_PFNMAP mappings; gaps in the address space).
// Best effort: a kernel without PAGEMAP_SCAN (before 6.7), or a refusal to
// open /proc/self/map_files (it needs CAP_CHECKPOINT_RESTORE or
// CAP_SYS_ADMIN), or a file system without SEEK_HOLE gives fewer ranges,
// never a wrong one. Errors (maps unreadable, an invalid region) have
// context.
//
// A snapshot: a page written after the scan passed it is still reported,
// so start dirty tracking before calling, and let the tracker's first
// report override this one. (The uffd-wp tracker read-faults the region
// when it starts: anonymous pages land on the zero page and still count,
// but each shmem hole becomes an allocated page, i.e. data.) Not for
// memory registered with userfaultfd MISSING or MINOR mode (a post-copy
// destination): there an absent page is whatever the handler supplies,
// and /proc/self/maps does not show the registration.
//
// Cost: one read of /proc/self/maps, then per overlapping VMA either one
// read-only PAGEMAP_SCAN pass over its page tables (one ioctl per 1024
// runs of like pages; mmap_lock taken for reading, write-protection left
// alone) or a stat, an open and two lseeks per data extent. No page is
// faulted in and no page's contents are read.
//
// kFileHolesOnly looks at shared files alone. That is what a caller about
// to read-fault the region wants to avoid (a read fault on a hole of a
// shared file allocates a page there; on untouched anonymous memory it
// maps the shared zero page, which this still reports afterwards), and
// what stays visible once the region is write-protected with userfaultfd
// (a protected never-touched anonymous page is a pte marker, which
// PAGEMAP_SCAN cannot tell from a swapped-out page).
enum class UntouchedScope { kAll, kFileHolesOnly };
absl::StatusOr<std::vector<ByteRange>> FindUntouchedRanges(
    const Region& region, UntouchedScope scope = UntouchedScope::kAll);

}  // namespace ramferry

#endif  // RAMFERRY_UNTOUCHED_H_
