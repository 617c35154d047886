#include "handoff/write_tracking.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/status_macros.h"
#include "ramferry/region.h"
#include "ramferry/untouched.h"
#include "ramferry/write_tracker.h"

namespace ramferry::handoff {
namespace {

// Debian 12's kernel headers (6.1) predate these; the values are the
// kernel's ABI (include/uapi/linux/userfaultfd.h).
constexpr uint64_t kFeatureWpUnpopulated = 1ull << 13;
constexpr uint64_t kFeatureWpAsync = 1ull << 15;
constexpr int kUserModeOnly = 1;  // UFFD_USER_MODE_ONLY
constexpr uint64_t kPage = kPageSize;

// MADV_POPULATE_READ over [base, base + length) but for the holes of
// shared files in it, spread over every core. Never-touched anonymous
// pages are read-faulted too: they map the shared zero page, which keeps
// them visible to the first scan once they are protected.
void PrefaultDataPages(uint8_t* base, uint64_t length) {
  Region whole;
  whole.base = base;
  whole.length = length;
  absl::StatusOr<std::vector<ByteRange>> holes =
      FindUntouchedRanges(whole, UntouchedScope::kFileHolesOnly);
  std::vector<ByteRange> data;
  uint64_t at = 0;
  for (const ByteRange& h : holes.ok() ? *holes : std::vector<ByteRange>{}) {
    if (h.offset > at) data.push_back({at, h.offset - at});
    at = h.end();
  }
  if (at < length) data.push_back({at, length - at});
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  // Slices of at most 64 MiB, dealt round-robin, so a few large extents
  // still spread over every core.
  constexpr uint64_t kSlice = 64ull << 20;
  std::vector<ByteRange> slices;
  for (const ByteRange& d : data) {
    for (uint64_t off = 0; off < d.length; off += kSlice) {
      slices.push_back({d.offset + off, std::min(kSlice, d.length - off)});
    }
  }
  auto work = [&](int t) {
    for (size_t i = t; i < slices.size(); i += threads) {
      PrefaultForRead(base + slices[i].offset, slices[i].length, 1);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& t : pool) t.join();
}

}  // namespace

absl::StatusOr<base::OwnedFd> OpenOwnPagemap() {
  base::OwnedFd fd(open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return base::ErrnoStatus(errno, "open /proc/self/pagemap");
  return fd;
}

absl::StatusOr<base::OwnedFd> OpenWriteProtectFd() {
  // User-mode-only faults are all we need (the workload's own writes), and
  // they work without vm.unprivileged_userfaultfd.
  base::OwnedFd uffd(static_cast<int>(
      syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | kUserModeOnly)));
  if (!uffd.valid()) return base::ErrnoStatus(errno, "userfaultfd");
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = kFeatureWpAsync | kFeatureWpUnpopulated;
  if (ioctl(uffd.get(), UFFDIO_API, &api) != 0) {
    // A kernel without the features: what to fix is the kernel.
    return absl::FailedPreconditionError(base::ErrnoMessage(
        errno,
        "userfaultfd UFFDIO_API with WP_ASYNC|WP_UNPOPULATED (Linux 6.7+)"));
  }
  return uffd;
}

absl::Status ArmWriteProtect(int uffd, void* base, uint64_t length) {
  if (reinterpret_cast<uint64_t>(base) % kPage != 0 || length % kPage != 0 ||
      length == 0) {
    return absl::InvalidArgumentError(
        "write tracking needs whole 4 KiB pages at a page-aligned address");
  }
  // Map every page that holds data before protecting: a page not yet
  // mapped here (a file's pages, which live in the page cache) is
  // protected by a marker, and a read through a marker faults page by page
  // (no fault-around), which cost the first scan of a 4 GiB /dev/shm file
  // ~0.7 s here. Populating maps them in batches, on every core; pages
  // already mapped cost a walk. Pages that hold nothing yet are left
  // alone: a read fault on a hole of a shared file allocates a page there,
  // and the first round sends such pages as ranges without reading them.
  // Best effort: without it the pages still fault in, only slower.
  PrefaultDataPages(static_cast<uint8_t*>(base), length);
  uffdio_register reg{};
  reg.range.start = reinterpret_cast<uint64_t>(base);
  reg.range.len = length;
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  uffdio_writeprotect wp{};
  wp.range = reg.range;
  wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
  if (ioctl(uffd, UFFDIO_REGISTER, &reg) != 0 ||
      ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) != 0) {
    // Memory of a kind write tracking cannot follow: the caller must bring
    // other memory, not retry.
    return absl::FailedPreconditionError(base::ErrnoMessage(
        errno, absl::StrFormat("userfaultfd write-protect of [0x%x, +%d) "
                               "(private anonymous memory or a shared "
                               "memfd, tmpfs or hugetlbfs mapping)",
                               reg.range.start, length)));
  }
  return absl::OkStatus();
}

WrittenPages::WrittenPages(int pagemap_fd, uint64_t base, uint64_t length)
    : pagemap_(pagemap_fd), base_(base), length_(length), vec_(4096) {}

absl::StatusOr<uint64_t> WrittenPages::Collect(DirtyBitmap& dirty) {
  using base::kPageIsWritten;
  uint64_t reported = 0;
  uint64_t start = base_;
  const uint64_t end = base_ + length_;
  while (start < end) {
    base::PmScanArg a{};
    a.size = sizeof a;
    a.flags = base::kScanWpMatching | base::kScanCheckWpAsync;
    a.start = start;
    a.end = end;
    a.vec = reinterpret_cast<uint64_t>(vec_.data());
    a.vec_len = vec_.size();
    a.category_mask = kPageIsWritten;
    a.return_mask = kPageIsWritten;
    const int n = ioctl(pagemap_, base::kPagemapScan, &a);
    if (n < 0) {
      if (errno == EINTR) continue;
      // EPERM: the range is not (or no longer) registered for async
      // write-protect, e.g. its owner closed the userfaultfd.
      return absl::FailedPreconditionError(base::ErrnoMessage(
          errno, "PAGEMAP_SCAN of the written pages (Linux 6.7+)"));
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t first = (vec_[i].start - base_) / kPage;
      const uint64_t count = (vec_[i].end - vec_[i].start) / kPage;
      dirty.SetRange(first, count);
      reported += count;
    }
    // The vector may fill before the walk reaches the end.
    if (a.walk_end <= start) {
      return absl::InternalError("PAGEMAP_SCAN made no progress");
    }
    start = a.walk_end;
  }
  return reported;
}

}  // namespace ramferry::handoff

namespace ramferry {
namespace {

class KernelWriteTracker final : public WriteTracker {
 public:
  KernelWriteTracker(void* base, uint64_t length, base::OwnedFd uffd,
                     base::OwnedFd pagemap)
      : pages_(length / kPageSize),
        uffd_(std::move(uffd)),
        pagemap_(std::move(pagemap)),
        written_(pagemap_.get(), reinterpret_cast<uint64_t>(base), length) {}
  absl::StatusOr<uint64_t> Collect(DirtyBitmap& dirty) override {
    // A shorter bitmap would drop pages the scan re-protects: lost writes.
    if (dirty.pages() != pages_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a bitmap of %d pages for %d tracked pages", dirty.pages(), pages_));
    }
    return written_.Collect(dirty);
  }

 private:
  const uint64_t pages_;
  base::OwnedFd uffd_;  // closing it unregisters the range
  base::OwnedFd pagemap_;
  handoff::WrittenPages written_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<WriteTracker>> WriteTracker::Track(
    void* base, uint64_t length) {
  absl::StatusOr<base::OwnedFd> uffd = handoff::OpenWriteProtectFd();
  if (!uffd.ok()) return uffd.status();
  RAMFERRY_RETURN_IF_ERROR(handoff::ArmWriteProtect(uffd->get(), base, length));
  absl::StatusOr<base::OwnedFd> pagemap = handoff::OpenOwnPagemap();
  if (!pagemap.ok()) return pagemap.status();
  auto tracker = std::make_unique<KernelWriteTracker>(
      base, length, *std::move(uffd), *std::move(pagemap));
  // Probe PAGEMAP_SCAN now, so a kernel without it fails here, clearly,
  // rather than mid-migration. Nothing was written yet: it reports 0.
  DirtyBitmap probe(length / kPageSize);
  if (absl::StatusOr<uint64_t> n = tracker->Collect(probe); !n.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel lacks PAGEMAP_SCAN (Linux 6.7+): ", n.status().message()));
  }
  return tracker;
}

}  // namespace ramferry
