// UffdPlacer's fault reader (engine/postcopy/uffd_placer.h): waits for
// the region's userfaultfd, reads a batch of fault messages, resolves
// locally the faults on pages the source never owed, and returns the
// others as requests, each once while it is pending.
#include <linux/userfaultfd.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"
#include "base/page_size.h"
#include "base/status_macros.h"
#include "engine/postcopy/uffd_placer.h"

namespace ramferry::engine {
absl::StatusOr<std::vector<uint64_t>> UffdPlacer::ReadFaults(
    size_t max_messages, absl::Duration timeout) {
  if (!registered_.load()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "post-copy: faults of region %d read while it is not registered "
        "(before Register() or after Finish())",
        region_.id));
  }
  if (reading_.exchange(true)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "post-copy: ReadFaults of region %d called from two threads at "
        "once; one reader per placer",
        region_.id));
  }
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag.store(false); }
  } done{reading_};

  RAMFERRY_ASSIGN_OR_RETURN(bool readable, AwaitFaults(timeout));
  if (!readable) return std::vector<uint64_t>{};
  std::vector<uffd_msg> msgs(std::clamp<size_t>(max_messages, 1, 4096));
  ssize_t n;
  do {
    n = read(uffd_, msgs.data(), msgs.size() * sizeof(uffd_msg));
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN) return std::vector<uint64_t>{};
  if (n < 0) {
    return base::ErrnoStatus(errno, "post-copy: read of the userfaultfd");
  }
  const int64_t now = SteadyNowNs();
  std::vector<uint64_t> out;
  // A message read is never read again: on an error the batch is still
  // worked through, so every other request is kept (in PendingFaults).
  absl::Status first_error;
  for (size_t i = 0; i < static_cast<size_t>(n) / sizeof(uffd_msg); ++i) {
    const uffd_msg& m = msgs[i];
    if (m.event != UFFD_EVENT_PAGEFAULT) continue;  // none asked for
    first_error.Update(TakeFault(m.arg.pagefault.address, now, &out));
  }
  std::sort(out.begin(), out.end());
  faulted_pages_.fetch_add(out.size(), std::memory_order_relaxed);
  if (!first_error.ok()) return first_error;
  return out;
}

absl::StatusOr<bool> UffdPlacer::AwaitFaults(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (shutdown_.load()) {
      return absl::CancelledError(absl::StrFormat(
          "post-copy: fault reader of region %d shut down", region_.id));
    }
    int wait_ms = -1;
    if (timeout != absl::InfiniteDuration()) {
      const absl::Duration left =
          std::max(deadline - absl::Now(), absl::ZeroDuration());
      wait_ms = static_cast<int>(std::min<int64_t>(
          absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
          1 << 30));
    }
    pollfd fds[2] = {{uffd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int ready = poll(fds, 2, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      return base::ErrnoStatus(errno, "post-copy: poll on the userfaultfd");
    }
    if (shutdown_.load() || (fds[1].revents & POLLIN) != 0) continue;
    if (ready == 0) return false;
    if ((fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
      return absl::InternalError(absl::StrFormat(
          "post-copy: the userfaultfd of region %d reports an error "
          "(revents 0x%x)",
          region_.id, fds[0].revents));
    }
    return true;
  }
}

absl::Status UffdPlacer::TakeFault(uint64_t address, int64_t now,
                                   std::vector<uint64_t>* out) {
  fault_messages_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t base = reinterpret_cast<uint64_t>(region_.base);
  const uint64_t addr = address & ~(base::kSmallPageSize - 1);
  if (addr < base || addr - base >= region_.length) {
    return absl::InternalError(absl::StrFormat(
        "post-copy: fault at 0x%x, outside region %d [0x%x, +%d)", addr,
        region_.id, base, region_.length));
  }
  const uint64_t page = (addr - base) / base::kSmallPageSize;
  if (!awaited_.Test(page)) {
    // Never owed by the source: it reads as zero. A thread that faulted
    // on it waited for the reader only.
    RAMFERRY_ASSIGN_OR_RETURN(bool zeroed, ResolveLocally(page));
    if (zeroed) local_zero_faults_.fetch_add(1, std::memory_order_relaxed);
    latency_.Add(
        static_cast<uint64_t>(std::max<int64_t>(0, SteadyNowNs() - now)));
    return absl::OkStatus();
  }
  if (pending_.Test(page)) return absl::OkStatus();  // asked for already
  {
    std::lock_guard<std::mutex> lock(arrival_mu_);
    arrival_ns_.insert_or_assign(page, now);
  }
  pending_.TestAndSet(page);
  if (!awaited_.Test(page)) {
    // Placed between the two tests: not a request any more. Whoever
    // clears the pending bit records the latency.
    if (pending_.TestAndClear(page)) {
      const uint64_t one[] = {page};
      RecordLatency(one, SteadyNowNs());
    }
    return absl::OkStatus();
  }
  out->push_back(page);
  return absl::OkStatus();
}

std::vector<uint64_t> UffdPlacer::PendingFaults() const {
  std::vector<uint64_t> out;
  pending_.ForEachSet([&](uint64_t page) { out.push_back(page); });
  return out;
}

}  // namespace ramferry::engine
