#include "engine/postcopy/uffd_placer.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/errno_status.h"
#include "base/page_size.h"
#include "base/status_macros.h"
#include "base/status_util.h"
#include "engine/postcopy/postcopy_memory.h"

namespace ramferry::engine {
namespace {

using base::ErrnoStatus;

// UFFDIO_COPY/ZEROPAGE answer EAGAIN without doing anything only while
// the address space is being changed under a non-cooperative monitor's
// events, which this placer does not ask for; a bound (about 2 s of
// PauseBeforeRetry) keeps a kernel that says it forever from holding a
// thread forever.
constexpr int kMaxIdleRetries = 2000;

// Between two retries without progress: a few yields, then sleeps that
// double up to 1 ms. The request path may run at real-time priority
// (thread_priority.h), where a yield gives the CPU only to other
// real-time threads: a sleep lets the normal ones, possibly the very
// thread whose change of the address space is in the way, run.
void PauseBeforeRetry(int idle) {
  constexpr int kYields = 16;
  if (idle <= kYields) {
    sched_yield();
    return;
  }
  const int64_t us = int64_t{1} << std::min(idle - kYields, 10);
  std::this_thread::sleep_for(std::chrono::microseconds(us));
}

// A userfaultfd for this process: the system call, then /dev/userfaultfd
// (Linux 6.1+), which a file mode can open to users without
// CAP_SYS_PTRACE. Never UFFD_USER_MODE_ONLY: a system call of the workload
// that touches an absent page (a write(2) from it) must wait for the page
// like the workload does, not fail with EFAULT.
absl::StatusOr<int> OpenUserfaultfd() {
  int fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd >= 0) return fd;
  const int sys_err = errno;
  int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (dev >= 0) {
    fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
    const int dev_err = errno;
    close(dev);
    if (fd >= 0) return fd;
    return ErrnoStatus(dev_err,
                       "post-copy: USERFAULTFD_IOC_NEW on "
                       "/dev/userfaultfd");
  }
  if (sys_err == ENOSYS) {
    return absl::UnimplementedError(
        "post-copy needs userfaultfd, which this kernel lacks "
        "(CONFIG_USERFAULTFD)");
  }
  return absl::PermissionDeniedError(absl::StrFormat(
      "post-copy: userfaultfd refused (%s) and /dev/userfaultfd not "
      "usable: run as root or with CAP_SYS_PTRACE, set "
      "vm.unprivileged_userfaultfd=1, or give this user access to "
      "/dev/userfaultfd",
      strerrordesc_np(sys_err)));
}

}  // namespace

int64_t UffdPlacer::SteadyNowNs() {
  return static_cast<int64_t>(base::MonotonicNs());
}

absl::StatusOr<std::unique_ptr<UffdPlacer>> UffdPlacer::Create(
    const Region& region) {
  if (absl::Status s = ValidateRegion(region); !s.ok()) {
    return base::Annotate(s, "post-copy");
  }
  if (region.page_size != base::kSmallPageSize ||
      static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) != base::kSmallPageSize) {
    return absl::UnimplementedError(absl::StrFormat(
        "post-copy of region %d: pages of %d bytes on a host with %d-byte "
        "pages; post-copy places 4 KiB pages only for now (huge pages are "
        "not supported yet: use 4 KiB pages for a post-copy destination)",
        region.id, region.page_size, sysconf(_SC_PAGESIZE)));
  }
  RAMFERRY_RETURN_IF_ERROR(CheckPostcopyRegion(region));
  RAMFERRY_ASSIGN_OR_RETURN(int uffd, OpenUserfaultfd());
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = 0;
  if (ioctl(uffd, UFFDIO_API, &api) != 0) {
    const int err = errno;
    close(uffd);
    return ErrnoStatus(err, "post-copy: UFFDIO_API");
  }
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    const int err = errno;
    close(uffd);
    return ErrnoStatus(err, "post-copy: eventfd");
  }
  return std::unique_ptr<UffdPlacer>(new UffdPlacer(region, uffd, wake));
}

UffdPlacer::UffdPlacer(const Region& region, int uffd, int wake_fd)
    : region_(region),
      page_count_(region.page_count()),
      uffd_(uffd),
      wake_fd_(wake_fd),
      awaited_(region.page_count()),
      pending_(region.page_count()) {}

UffdPlacer::~UffdPlacer() {
  Shutdown();
  close(wake_fd_);
  // Closing would unregister the region, and a thread still blocked on an
  // awaited page would retry its fault and run on with a fresh zero page:
  // a workload corrupted without anyone having asked (a VMM's error path
  // frees the migration before it stops its vCPUs). So while any page is
  // awaited the descriptor is kept open, deliberately, for the process's
  // life: those threads stay blocked until ReleaseAll() (before this) lets
  // them go on zeros, or the process ends. See the header.
  if (awaited_pages() != 0 && registered_.load()) return;
  close(uffd_);
}

absl::Status UffdPlacer::CheckRange(uint64_t first_page, uint64_t pages,
                                    const char* what) const {
  if (pages == 0 || first_page >= page_count_ ||
      pages > page_count_ - first_page) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "post-copy %s: pages [%d, +%d) are not a non-empty range inside "
        "region %d's %d pages",
        what, first_page, pages, region_.id, page_count_));
  }
  return absl::OkStatus();
}

absl::Status UffdPlacer::DropPages(absl::Span<const PageRange> ranges) {
  for (const PageRange& r : ranges) {
    RAMFERRY_RETURN_IF_ERROR(CheckRange(r.first, r.count, "drop"));
  }
  if (!registered_.load()) {
    // Dropped unregistered, a page could be filled again before the
    // registration (a read maps the zero page, khugepaged collapses over
    // it), and its placement would then find it present: zeros where the
    // source's bytes belong.
    return absl::FailedPreconditionError(absl::StrFormat(
        "post-copy: pages of region %d dropped before Register(); register "
        "first, so that nothing but a placement fills a dropped page",
        region_.id));
  }
  for (const PageRange& r : ranges) {
    // Awaited before discarded: whoever sees the page absent also sees
    // that it is awaited, so it is never taken for untouched memory.
    awaited_.SetRange(r.first, r.count);
    dropped_pages_.fetch_add(r.count, std::memory_order_relaxed);
    if (madvise(region_.page(r.first), r.count * base::kSmallPageSize,
                MADV_DONTNEED) != 0) {
      return ErrnoStatus(
          errno, absl::StrFormat("post-copy: MADV_DONTNEED of pages [%d, +%d) "
                                 "of region %d",
                                 r.first, r.count, region_.id));
    }
  }
  return absl::OkStatus();
}

absl::Status UffdPlacer::Register() {
  if (registered_.load()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "post-copy: region %d is registered already", region_.id));
  }
  uffdio_register reg{};
  reg.range.start = reinterpret_cast<uint64_t>(region_.base);
  reg.range.len = region_.length;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING;
  if (ioctl(uffd_, UFFDIO_REGISTER, &reg) != 0) {
    return ErrnoStatus(
        errno, absl::StrFormat("post-copy: UFFDIO_REGISTER of region %d "
                               "(MISSING mode)",
                               region_.id));
  }
  const uint64_t need =
      (uint64_t{1} << _UFFDIO_COPY) | (uint64_t{1} << _UFFDIO_ZEROPAGE);
  if ((reg.ioctls & need) != need) {
    uffdio_range range = reg.range;
    ioctl(uffd_, UFFDIO_UNREGISTER, &range);
    return absl::UnimplementedError(absl::StrFormat(
        "post-copy: region %d's memory does not take UFFDIO_COPY and "
        "UFFDIO_ZEROPAGE (offered ioctls 0x%x); use private anonymous "
        "memory with 4 KiB pages",
        region_.id, reg.ioctls));
  }
  registered_.store(true);
  return absl::OkStatus();
}

namespace {
void PlacedNowhere(uint64_t, uint64_t) {}
}  // namespace

absl::StatusOr<PlaceResult> UffdPlacer::Place(uint64_t first_page,
                                              const void* src, uint64_t pages) {
  return Place(first_page, src, pages, PlacedNowhere);
}

absl::StatusOr<PlaceResult> UffdPlacer::PlaceZero(uint64_t first_page,
                                                  uint64_t pages) {
  return PlaceZero(first_page, pages, PlacedNowhere);
}

absl::StatusOr<PlaceResult> UffdPlacer::Place(uint64_t first_page,
                                              const void* src, uint64_t pages,
                                              OnPlaced on_placed) {
  if (src == nullptr) {
    return absl::InvalidArgumentError("post-copy place: no source bytes");
  }
  absl::StatusOr<PlaceResult> r =
      PlaceRuns(first_page, static_cast<const uint8_t*>(src), pages,
                Fill::kCopy, on_placed);
  if (r.ok()) {
    placed_pages_.fetch_add(r->placed, std::memory_order_relaxed);
    duplicate_pages_.fetch_add(r->dropped, std::memory_order_relaxed);
  }
  return r;
}

absl::StatusOr<PlaceResult> UffdPlacer::PlaceZero(uint64_t first_page,
                                                  uint64_t pages,
                                                  OnPlaced on_placed) {
  absl::StatusOr<PlaceResult> r =
      PlaceRuns(first_page, nullptr, pages, Fill::kZero, on_placed);
  if (r.ok()) {
    zero_placed_pages_.fetch_add(r->placed, std::memory_order_relaxed);
    duplicate_pages_.fetch_add(r->dropped, std::memory_order_relaxed);
  }
  return r;
}

absl::StatusOr<PlaceResult> UffdPlacer::PlaceRuns(uint64_t first_page,
                                                  const uint8_t* src,
                                                  uint64_t pages, Fill fill,
                                                  OnPlaced on_placed) {
  RAMFERRY_RETURN_IF_ERROR(CheckRange(first_page, pages, "placement"));
  PlaceResult result;
  const uint64_t end = first_page + pages;
  uint64_t p = first_page;
  while (p < end) {
    // Pages not awaited are skipped without a system call: they were
    // placed already (or never owed), and must keep what they hold. So a
    // late copy after Finish() (nothing awaited then) is dropped, not an
    // error: the bulk and urgent paths race to the last pages.
    const uint64_t run = awaited_.NextSet(p, end);
    result.dropped += run - p;
    if (run == end) break;
    if (!registered_.load()) {
      // Placed by another thread since, which then let Finish() run.
      if (awaited_.NextSet(run, end) == end) {
        result.dropped += end - run;
        break;
      }
      return absl::FailedPreconditionError(absl::StrFormat(
          "post-copy: placement into region %d while it is not registered "
          "(before Register() or after Finish())",
          region_.id));
    }
    const uint64_t run_end = awaited_.NextClear(run, end);
    const uint8_t* run_src =
        src == nullptr ? nullptr
                       : src + (run - first_page) * base::kSmallPageSize;
    RAMFERRY_RETURN_IF_ERROR(
        FillRun(run, run_end, run_src, fill, result, on_placed));
    p = run_end;
  }
  return result;
}

int64_t UffdPlacer::FillIoctl(uint64_t first, uint64_t pages,
                              const uint8_t* src, Fill fill) {
  const uint64_t dst = reinterpret_cast<uint64_t>(region_.page(first));
  const uint64_t len = pages * base::kSmallPageSize;
  if (fill == Fill::kCopy) {
    uffdio_copy c{};
    c.dst = dst;
    c.src = reinterpret_cast<uint64_t>(src);
    c.len = len;
    c.mode = 0;
    c.copy = 0;  // the kernel leaves it alone on some early failures
    if (ioctl(uffd_, UFFDIO_COPY, &c) == 0) return static_cast<int64_t>(pages);
    const int err = errno;
    if (c.copy > 0) return c.copy / static_cast<int64_t>(base::kSmallPageSize);
    return -err;
  }
  uffdio_zeropage z{};
  z.range.start = dst;
  z.range.len = len;
  z.mode = 0;
  z.zeropage = 0;
  if (ioctl(uffd_, UFFDIO_ZEROPAGE, &z) == 0) {
    return static_cast<int64_t>(pages);
  }
  const int err = errno;
  if (z.zeropage > 0) {
    return z.zeropage / static_cast<int64_t>(base::kSmallPageSize);
  }
  return -err;
}

absl::Status UffdPlacer::FillRun(uint64_t first, uint64_t end,
                                 const uint8_t* src, Fill fill,
                                 PlaceResult& result, OnPlaced on_placed) {
  const uint64_t run_first = first;
  int idle = 0;
  while (first < end) {
    const uint8_t* at = src == nullptr
                            ? nullptr
                            : src + (first - run_first) * base::kSmallPageSize;
    const int64_t n = FillIoctl(first, end - first, at, fill);
    if (n > 0) {
      // A partial fill (the kernel's EAGAIN with a byte count) stopped at
      // a present page or a signal; the loop goes on from there.
      on_placed(first, first + static_cast<uint64_t>(n));
      Landed(first, first + static_cast<uint64_t>(n));
      result.placed += static_cast<uint64_t>(n);
      first += static_cast<uint64_t>(n);
      idle = 0;
      continue;
    }
    if (n == -EEXIST) {
      // Present already: another placement won the race for this page
      // (dropped registered, nothing else can fill it). Its bytes stay;
      // the threads that waited for it were woken by whoever made it
      // present. It cannot fault again, so it is no longer awaited.
      Landed(first, first + 1);
      ++result.dropped;
      ++first;
      idle = 0;
      continue;
    }
    if (n == -EAGAIN || n == -EINTR) {
      eagain_retries_.fetch_add(1, std::memory_order_relaxed);
      if (++idle > kMaxIdleRetries) {
        return absl::UnavailableError(absl::StrFormat(
            "post-copy: %s of region %d page %d answered EAGAIN %d times "
            "without progress",
            fill == Fill::kCopy ? "UFFDIO_COPY" : "UFFDIO_ZEROPAGE", region_.id,
            first, kMaxIdleRetries));
      }
      PauseBeforeRetry(idle);
      continue;
    }
    const int err = static_cast<int>(-n);
    if (!awaited_.Test(first)) {
      // Another placement won this page and the region was unregistered
      // (Finish) before this ioctl ran: a late copy, dropped.
      ++result.dropped;
      ++first;
      idle = 0;
      continue;
    }
    return FillError(fill, first, end, err);
  }
  return absl::OkStatus();
}

absl::Status UffdPlacer::FillError(Fill fill, uint64_t first, uint64_t end,
                                   int err) const {
  std::string what =
      absl::StrFormat("post-copy: %s of pages [%d, +%d) of region %d",
                      fill == Fill::kCopy ? "UFFDIO_COPY" : "UFFDIO_ZEROPAGE",
                      first, end - first, region_.id);
  if (err == ENOENT) {
    what +=
        " (the region was unmapped or remapped while registered; "
        "keep the region's layout fixed during post-copy)";
  } else if (err == ESRCH) {
    what += " (the process that owns the region is exiting)";
  }
  return ErrnoStatus(err, what);
}

void UffdPlacer::Landed(uint64_t first, uint64_t end) {
  // Order matters (see atomic_page_set.h): awaited cleared, then pending
  // taken, against the reader's pending set, then awaited tested.
  awaited_.ClearRange(first, end - first);
  std::vector<uint64_t> faulted;
  pending_.ClearRange(first, end - first,
                      [&](uint64_t page) { faulted.push_back(page); });
  if (!faulted.empty()) RecordLatency(faulted, SteadyNowNs());
  if (waiters_.load() > 0) {
    std::lock_guard<std::mutex> lock(wait_mu_);
    resident_cv_.notify_all();
  }
}

void UffdPlacer::RecordLatency(absl::Span<const uint64_t> pages,
                               int64_t now_ns) {
  std::lock_guard<std::mutex> lock(arrival_mu_);
  for (uint64_t page : pages) {
    auto it = arrival_ns_.find(page);
    if (it == arrival_ns_.end()) continue;
    latency_.Add(
        static_cast<uint64_t>(std::max<int64_t>(0, now_ns - it->second)));
    arrival_ns_.erase(it);
  }
}

absl::StatusOr<bool> UffdPlacer::ResolveLocally(uint64_t page) {
  int idle = 0;
  for (;;) {
    const int64_t n = FillIoctl(page, 1, nullptr, Fill::kZero);
    if (n > 0) return true;
    // Present: the fault was resolved by a placement after it was sent.
    if (n == -EEXIST) return false;
    if ((n == -EAGAIN || n == -EINTR) && ++idle <= kMaxIdleRetries) {
      eagain_retries_.fetch_add(1, std::memory_order_relaxed);
      PauseBeforeRetry(idle);
      continue;
    }
    return ErrnoStatus(
        static_cast<int>(-n),
        absl::StrFormat("post-copy: UFFDIO_ZEROPAGE of untouched page %d of "
                        "region %d",
                        page, region_.id));
  }
}

std::vector<PageRange> UffdPlacer::AwaitedRanges(uint64_t from_page,
                                                 size_t max_ranges,
                                                 uint64_t* next) const {
  std::vector<PageRange> out;
  uint64_t p = from_page;
  while (out.size() < max_ranges) {
    const uint64_t first = awaited_.NextSet(p, page_count_);
    if (first >= page_count_) break;
    const uint64_t end = awaited_.NextClear(first, page_count_);
    out.push_back({first, end - first});
    p = end;
  }
  *next = out.size() < max_ranges ? page_count_ : p;
  return out;
}

bool UffdPlacer::IsResident(uint64_t first_page, uint64_t pages) const {
  if (!CheckRange(first_page, pages, "residency query").ok()) return false;
  return !awaited_.AnySet(first_page, pages);
}

absl::Status UffdPlacer::WaitResident(uint64_t first_page, uint64_t pages,
                                      absl::Time deadline) {
  RAMFERRY_RETURN_IF_ERROR(CheckRange(first_page, pages, "residency wait"));
  std::unique_lock<std::mutex> lock(wait_mu_);
  // Counted before the test (both sequentially consistent): a placement
  // that cleared the last bit after the test sees the waiter and signals.
  waiters_.fetch_add(1);
  absl::Status result;
  for (;;) {
    if (!awaited_.AnySet(first_page, pages)) break;
    if (shutdown_.load()) {
      result = absl::CancelledError(absl::StrFormat(
          "post-copy: placer of region %d shut down while waiting for pages "
          "[%d, +%d)",
          region_.id, first_page, pages));
      break;
    }
    if (deadline == absl::InfiniteFuture()) {
      resident_cv_.wait(lock);
      continue;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      uint64_t still = 0;
      for (uint64_t p = first_page; p < first_page + pages; ++p) {
        still += awaited_.Test(p) ? 1 : 0;
      }
      result = absl::DeadlineExceededError(absl::StrFormat(
          "post-copy: pages [%d, +%d) of region %d not resident by the "
          "deadline (%d of them still awaited)",
          first_page, pages, region_.id, still));
      break;
    }
    resident_cv_.wait_for(lock, absl::ToChronoNanoseconds(left));
  }
  waiters_.fetch_sub(1);
  return result;
}

void UffdPlacer::Shutdown() {
  if (shutdown_.exchange(true)) return;
  const uint64_t one = 1;
  // A full counter would already wake the reader; nothing to handle.
  (void)!write(wake_fd_, &one, sizeof one);
  std::lock_guard<std::mutex> lock(wait_mu_);
  resident_cv_.notify_all();
}

absl::StatusOr<uint64_t> UffdPlacer::ReleaseAll() {
  if (!registered_.load()) {
    // Nothing can be blocked yet; what was dropped reads as zero anyway.
    const uint64_t n = awaited_.ClearRange(0, page_count_);
    released_pages_.fetch_add(n, std::memory_order_relaxed);
    return n;
  }
  uint64_t released = 0;
  uint64_t p = 0;
  while ((p = awaited_.NextSet(p, page_count_)) < page_count_) {
    const uint64_t end = awaited_.NextClear(p, page_count_);
    PlaceResult r;
    RAMFERRY_RETURN_IF_ERROR(
        FillRun(p, end, nullptr, Fill::kZero, r, PlacedNowhere));
    released += r.placed;
    p = end;
  }
  released_pages_.fetch_add(released, std::memory_order_relaxed);
  return released;
}

absl::Status UffdPlacer::Finish() {
  const uint64_t left = awaited_.Count();
  if (left != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "post-copy of region %d cannot finish: %d pages are still awaited; "
        "place them (or ReleaseAll() to give the destination up)",
        region_.id, left));
  }
  if (!registered_.exchange(false)) return absl::OkStatus();
  uffdio_range range{};
  range.start = reinterpret_cast<uint64_t>(region_.base);
  range.len = region_.length;
  if (ioctl(uffd_, UFFDIO_UNREGISTER, &range) != 0) {
    return ErrnoStatus(
        errno, absl::StrFormat("post-copy: UFFDIO_UNREGISTER of region %d",
                               region_.id));
  }
  return absl::OkStatus();
}

UffdPlacerStats UffdPlacer::stats() const {
  UffdPlacerStats s;
  s.awaited_pages = awaited_.Count();
  s.dropped_pages = dropped_pages_.load(std::memory_order_relaxed);
  s.fault_messages = fault_messages_.load(std::memory_order_relaxed);
  s.faulted_pages = faulted_pages_.load(std::memory_order_relaxed);
  s.local_zero_faults = local_zero_faults_.load(std::memory_order_relaxed);
  s.placed_pages = placed_pages_.load(std::memory_order_relaxed);
  s.zero_placed_pages = zero_placed_pages_.load(std::memory_order_relaxed);
  s.duplicate_pages = duplicate_pages_.load(std::memory_order_relaxed);
  s.released_pages = released_pages_.load(std::memory_order_relaxed);
  s.eagain_retries = eagain_retries_.load(std::memory_order_relaxed);
  s.latency = latency_.Snapshot();
  return s;
}

}  // namespace ramferry::engine
