// Which pages of a mapping were written, as the kernel tracks them: the
// range registered with userfaultfd in asynchronous write-protect mode (no
// fault handler: the kernel resolves a write fault by unprotecting the
// page and marking it written), and PAGEMAP_SCAN reporting the written
// pages and re-protecting them in the same atomic step, so a write that
// races with a scan is never lost. Linux 6.7+.
//
// The two halves are apart because they may live in two processes: only
// the process that owns the mapping can register it (ArmWriteProtect), but
// PAGEMAP_SCAN acts on the mm of the process that opened the pagemap fd,
// so whoever holds that fd can scan (WrittenPages).
#ifndef RAMFERRY_HANDOFF_WRITE_TRACKING_H_
#define RAMFERRY_HANDOFF_WRITE_TRACKING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/owned_fd.h"
#include "base/pagemap_scan.h"
#include "ramferry/dirty_bitmap.h"

namespace ramferry::handoff {

// A userfaultfd for async write-protect tracking of this process. Every
// range armed with it stays registered while a duplicate of it is open.
absl::StatusOr<base::OwnedFd> OpenWriteProtectFd();

// Write-protects [base, base + length) of this process (4 KiB pages)
// through `uffd`. Pages holding data are mapped first, on every core, so
// the first scan does not fault them in one by one. Errors name the
// missing kernel feature.
absl::Status ArmWriteProtect(int uffd, void* base, uint64_t length);

absl::StatusOr<base::OwnedFd> OpenOwnPagemap();

// Scans [base, base + length) of the mm behind `pagemap_fd` (borrowed).
class WrittenPages {
 public:
  WrittenPages(int pagemap_fd, uint64_t base, uint64_t length);
  // ORs every page written since the last scan (or the registration) into
  // `dirty` (page 0 = base) and re-protects it. Returns how many.
  absl::StatusOr<uint64_t> Collect(DirtyBitmap& dirty);

 private:
  const int pagemap_;
  const uint64_t base_;
  const uint64_t length_;
  std::vector<base::PageRegion> vec_;
};

}  // namespace ramferry::handoff

#endif  // RAMFERRY_HANDOFF_WRITE_TRACKING_H_
