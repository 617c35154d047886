// Which pages of a live region were written since the last look.
//
// uffd-wp: the kernel tracks writes itself. The region is registered with
// userfaultfd in asynchronous write-protect mode (no fault handler thread:
// the kernel resolves a write fault by unprotecting the page and marking it
// written) and PAGEMAP_SCAN reports the written pages and re-protects them
// in the same atomic step, so a write that races with a scan is never lost.
// Needs Linux 6.7+ (verified on this machine's 6.18).
//
// bitmap: the workload marks each page after writing it; for kernels
// without the above, and for callers that know their own writes.
#ifndef RAMFERRY_TOOLS_MIGRATE_DIRTY_TRACKER_H_
#define RAMFERRY_TOOLS_MIGRATE_DIRTY_TRACKER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ramferry/dirty_bitmap.h"

namespace ramferry::migrate {

class DirtyTracker {
 public:
  virtual ~DirtyTracker() = default;
  virtual absl::string_view name() const = 0;
  // ORs every page written since the previous Collect (or since the
  // tracker was made) into `dirty` and re-arms tracking for it. Returns
  // how many pages it reported.
  virtual absl::StatusOr<uint64_t> Collect(DirtyBitmap& dirty) = 0;
  // The same over several regions, one bitmap each, in the order the
  // tracker was made for; a tracker of one region takes exactly one.
  virtual absl::StatusOr<uint64_t> CollectAll(
      absl::Span<DirtyBitmap* const> dirty) {
    if (dirty.size() != 1) {
      return absl::InvalidArgumentError("this tracker covers one region");
    }
    return Collect(*dirty[0]);
  }
  // Records a write by a workload that tracks its own writes; trackers
  // that see writes themselves ignore it.
  virtual void MarkWritten(uint64_t page) {}
};

// Write-protects [base, base + length) (4 KiB pages) and tracks writes.
// Fails with a message that names the missing kernel feature.
absl::StatusOr<std::unique_ptr<DirtyTracker>> MakeUffdWpTracker(
    void* base, uint64_t length);

std::unique_ptr<DirtyTracker> MakeBitmapTracker(uint64_t pages);

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_DIRTY_TRACKER_H_
