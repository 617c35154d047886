#include "ramferry/region.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/status_macros.h"
#include "engine/pages/region_file.h"
#include "proto/control.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; Debian 12's headers lack it
#endif

namespace ramferry {

absl::Status ValidateRegion(const Region& r) {
  proto::RegionInfo info{r.id, r.page_size, r.length, r.name};
  RAMFERRY_RETURN_IF_ERROR(proto::ValidateRegionInfo(info));
  // Pages are tracked at page_size granularity, but memory only needs to
  // be aligned like the host's pages (a 2 MiB tracking page may sit in
  // ordinary 4 KiB-aligned memory).
  const uintptr_t align = std::min<uint32_t>(r.page_size, 4096);
  if (r.base == nullptr || reinterpret_cast<uintptr_t>(r.base) % align != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "region %d base %p is not %d-byte aligned", r.id, r.base, align));
  }
  // Reading is all either end needs of it to start; a destination asks
  // for writing too (Receiver::Listen).
  return engine::CheckRegionFile(r, /*writable=*/false);
}

absl::StatusOr<std::unique_ptr<MappedMemory>> MappedMemory::Allocate(
    uint64_t length, const Options& options) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (length == 0 || length % page != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "mapping length %d is not a positive multiple of %d", length, page));
  }
  const size_t guard = options.guard_pages ? page : 0;
  const size_t total = length + 2 * guard;
  void* m = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    return base::ErrnoStatus(errno, absl::StrFormat("mmap of %d bytes", total));
  }
  auto* base = static_cast<uint8_t*>(m);
  if (guard != 0 && (mprotect(base, guard, PROT_NONE) != 0 ||
                     mprotect(base + guard + length, guard, PROT_NONE) != 0)) {
    int err = errno;
    munmap(m, total);
    return base::ErrnoStatus(err, "mprotect of guard pages");
  }
  if (options.huge_pages) {
    // Advisory: a kernel without THP simply ignores it for our purposes.
    madvise(base + guard, length, MADV_HUGEPAGE);
  }
  return std::unique_ptr<MappedMemory>(
      new MappedMemory(base, total, base + guard, length));
}

MappedMemory::~MappedMemory() { munmap(mapping_, mapping_length_); }

namespace {

// Runs fn(begin, end) over `threads` contiguous, page-aligned slices.
template <typename Fn>
void ParallelSlices(uint64_t length, int threads, Fn fn) {
  threads = std::max(1, threads);
  const uint64_t page = kPageSize;
  uint64_t slice = (length / threads + page - 1) / page * page;
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) {
    uint64_t begin = std::min(length, slice * t);
    uint64_t end = std::min(length, begin + slice);
    if (begin < end) pool.emplace_back(fn, begin, end);
  }
  fn(0, std::min(length, slice));
  for (std::thread& th : pool) th.join();
}

}  // namespace

absl::Status PrefaultForWrite(void* base, uint64_t length, int threads) {
  auto* p = static_cast<uint8_t*>(base);
  std::atomic<int> first_error{0};
  ParallelSlices(length, threads, [&](uint64_t begin, uint64_t end) {
    if (madvise(p + begin, end - begin, MADV_POPULATE_WRITE) == 0) return;
    int err = errno;
    if (err != EINVAL) {
      first_error.store(err);
      return;
    }
    // Kernel older than 5.14: fault each page in by rewriting one byte
    // (callers prefault before data arrives, so nothing else writes).
    for (uint64_t off = begin; off < end; off += kPageSize) {
      volatile uint8_t* b = p + off;
      *b = *b;
    }
  });
  if (int err = first_error.load(); err != 0) {
    return base::ErrnoStatus(err, "madvise(MADV_POPULATE_WRITE)");
  }
  return absl::OkStatus();
}

void PrefaultForRead(void* base, uint64_t length, int threads) {
  auto* p = static_cast<uint8_t*>(base);
  ParallelSlices(length, threads, [&](uint64_t begin, uint64_t end) {
    madvise(p + begin, end - begin, MADV_POPULATE_READ);
  });
}

void FillRandom(void* base, uint64_t length, uint64_t seed, int threads) {
  auto* p = static_cast<uint8_t*>(base);
  ParallelSlices(length, threads, [&](uint64_t begin, uint64_t end) {
    // splitmix64 keyed by position: the same seed gives the same bytes
    // whatever the thread count.
    for (uint64_t off = begin; off + 8 <= end; off += 8) {
      uint64_t z = seed + off * 0x9E3779B97F4A7C15ull;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      std::memcpy(p + off, &z, 8);
    }
  });
}

}  // namespace ramferry
