#include "tools/migrate/dirty_tracker.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/pagemap_scan.h"
#include "ramferry/region.h"
#include "ramferry/untouched.h"

namespace ramferry::migrate {
namespace {

// Debian 12's kernel headers (6.1) predate these; the values are the
// kernel's ABI (include/uapi/linux/userfaultfd.h; PAGEMAP_SCAN's, from
// fs.h, are in base/pagemap_scan.h).
constexpr uint64_t kFeatureWpUnpopulated = 1ull << 13;
constexpr uint64_t kFeatureWpAsync = 1ull << 15;
constexpr int kUserModeOnly = 1;  // UFFD_USER_MODE_ONLY
using base::kPageIsWritten;
using base::kPagemapScan;
using base::kScanCheckWpAsync;
using base::kScanWpMatching;
using base::PageRegion;
using base::PmScanArg;
constexpr uint64_t kPage = kPageSize;

absl::Status Errno(absl::string_view what) {
  return absl::FailedPreconditionError(
      absl::StrFormat("%s: %s; use --dirty-tracking=bitmap", what,
                      std::generic_category().message(errno)));
}

class UffdWpTracker final : public DirtyTracker {
 public:
  UffdWpTracker(void* base, uint64_t length, int uffd, int pagemap)
      : base_(reinterpret_cast<uint64_t>(base)),
        length_(length),
        uffd_(uffd),
        pagemap_(pagemap),
        vec_(4096) {}
  ~UffdWpTracker() override {
    close(pagemap_);
    close(uffd_);  // unregisters the range
  }

  absl::string_view name() const override { return "uffd-wp"; }

  absl::StatusOr<uint64_t> Collect(DirtyBitmap& dirty) override {
    uint64_t reported = 0;
    uint64_t start = base_;
    const uint64_t end = base_ + length_;
    while (start < end) {
      PmScanArg a{};
      a.size = sizeof a;
      a.flags = kScanWpMatching | kScanCheckWpAsync;
      a.start = start;
      a.end = end;
      a.vec = reinterpret_cast<uint64_t>(vec_.data());
      a.vec_len = vec_.size();
      a.category_mask = kPageIsWritten;
      a.return_mask = kPageIsWritten;
      int n = ioctl(pagemap_, kPagemapScan, &a);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Errno("PAGEMAP_SCAN");
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

 private:
  const uint64_t base_;
  const uint64_t length_;
  const int uffd_;
  const int pagemap_;
  std::vector<PageRegion> vec_;
};

class BitmapTracker final : public DirtyTracker {
 public:
  explicit BitmapTracker(uint64_t pages) : written_(pages) {}
  absl::string_view name() const override { return "bitmap"; }
  void MarkWritten(uint64_t page) override { written_.Set(page); }
  absl::StatusOr<uint64_t> Collect(DirtyBitmap& dirty) override {
    uint64_t reported = 0;
    for (size_t w = 0; w < written_.words(); ++w) {
      uint64_t bits = written_.TakeWord(w);
      reported += __builtin_popcountll(bits);
      dirty.OrWord(w, bits);
    }
    return reported;
  }

 private:
  DirtyBitmap written_;
};

// MADV_POPULATE_READ over [base, base + length) but for the holes of
// shared files in it, spread over every core. Never-touched anonymous
// pages are read-faulted too: they map the shared zero page, which keeps
// them visible to the first round's scan once they are protected.
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

absl::StatusOr<std::unique_ptr<DirtyTracker>> MakeUffdWpTracker(
    void* base, uint64_t length) {
  if (reinterpret_cast<uint64_t>(base) % kPage != 0 || length % kPage != 0) {
    return absl::InvalidArgumentError("region is not 4 KiB aligned");
  }
  // User-mode-only faults are all we need (the workload's own writes), and
  // they work without vm.unprivileged_userfaultfd.
  int uffd = static_cast<int>(
      syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | kUserModeOnly));
  if (uffd < 0) return Errno("userfaultfd");
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = kFeatureWpAsync | kFeatureWpUnpopulated;
  if (ioctl(uffd, UFFDIO_API, &api) != 0) {
    absl::Status s = Errno(
        "userfaultfd UFFDIO_API with WP_ASYNC|WP_UNPOPULATED (Linux 6.7+)");
    close(uffd);
    return s;
  }
  // Map every page that holds data before protecting: a page not yet
  // mapped here (a file's pages, which live in the page cache) is
  // protected by a marker, and a read through a marker faults page by page
  // (no fault-around), which cost round 0 of a 4 GiB /dev/shm file ~0.7 s
  // here. Populating maps them in batches, on every core; pages already
  // mapped cost a walk. Pages that hold nothing yet are left alone: a read
  // fault on a hole of a shared file allocates a page there, and the first
  // round sends such pages as ranges without reading them. Best effort:
  // without it the pages still fault in, only slower.
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
    absl::Status s = Errno("userfaultfd write-protect of the region");
    close(uffd);
    return s;
  }
  int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) {
    absl::Status s = Errno("open /proc/self/pagemap");
    close(uffd);
    return s;
  }
  auto tracker = std::make_unique<UffdWpTracker>(base, length, uffd, pagemap);
  // Probe PAGEMAP_SCAN now, so a kernel without it fails here, clearly,
  // rather than mid-migration. Nothing was written yet: it reports 0.
  DirtyBitmap probe(length / kPage);
  if (absl::StatusOr<uint64_t> n = tracker->Collect(probe); !n.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel lacks PAGEMAP_SCAN (Linux 6.7+): ", n.status().message()));
  }
  return tracker;
}

std::unique_ptr<DirtyTracker> MakeBitmapTracker(uint64_t pages) {
  return std::make_unique<BitmapTracker>(pages);
}

}  // namespace ramferry::migrate
