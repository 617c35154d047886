// Which pages of this process's memory were written since the last look,
// as the kernel tracks them (userfaultfd async write-protect and
// PAGEMAP_SCAN, Linux 6.7+): no fault handler, no copy, a write that races
// with a scan is never lost. For the memory of ANOTHER process, see
// ramferry/memory_handoff.h.
#ifndef RAMFERRY_WRITE_TRACKER_H_
#define RAMFERRY_WRITE_TRACKER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "ramferry/dirty_bitmap.h"

namespace ramferry {

class WriteTracker {
 public:
  // Starts tracking [base, base + length) (4 KiB pages; private anonymous
  // memory, or a shared memfd, tmpfs or hugetlbfs mapping). Fails with a
  // message naming the missing kernel feature. Destroying the tracker
  // stops tracking.
  static absl::StatusOr<std::unique_ptr<WriteTracker>> Track(void* base,
                                                             uint64_t length);
  virtual ~WriteTracker() = default;
  // ORs every page written since the previous Collect (or since Track)
  // into `dirty` (page 0 = base) and re-arms tracking for it. Returns how
  // many pages it reported.
  virtual absl::StatusOr<uint64_t> Collect(DirtyBitmap& dirty) = 0;
};

}  // namespace ramferry

#endif  // RAMFERRY_WRITE_TRACKER_H_
