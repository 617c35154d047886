#include "engine/verify.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "engine/pages/region_file.h"
#include "engine/untouched.h"

namespace ramferry::engine {

void PageDigests(const Region& region, uint64_t first_page,
                 absl::Span<uint64_t> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = XXH3_64bits(region.page(first_page + i), region.page_size);
  }
}

absl::StatusOr<std::unique_ptr<DigestTable>> DigestTable::Create(
    absl::Span<const Region> regions) {
  std::unique_ptr<DigestTable> d(new DigestTable());
  d->tables_.reserve(regions.size());
  for (const Region& r : regions) {
    Table t;
    t.region = r;
    t.base = static_cast<const uint8_t*>(r.base);
    t.page_size = r.page_size;
    t.pages = r.page_count();
    t.mapped = std::max<size_t>(1, t.pages) * sizeof(uint64_t);
    void* m = mmap(nullptr, t.mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "cannot reserve %d bytes for the page digests of region %d: %s",
          t.mapped, r.id, std::generic_category().message(errno)));
    }
    t.digests = static_cast<uint64_t*>(m);
    const std::vector<uint8_t> zeros(r.page_size, 0);
    t.zero_digest = XXH3_64bits(zeros.data(), zeros.size());
    d->tables_.push_back(t);
  }
  return d;
}

DigestTable::~DigestTable() {
  for (const Table& t : tables_) munmap(t.digests, t.mapped);
}

void DigestTable::Record(size_t index, absl::Span<const uint64_t> run_offsets,
                         absl::Span<const iovec> runs) {
  const Table& t = tables_[index];
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto* p = static_cast<const uint8_t*>(runs[i].iov_base);
    uint64_t page = run_offsets[i] / t.page_size;
    for (size_t done = 0; done < runs[i].iov_len; done += t.page_size) {
      t.digests[page++] = XXH3_64bits(p + done, t.page_size);
    }
  }
}

void DigestTable::RecordZero(size_t index, uint64_t first, uint64_t count) {
  const Table& t = tables_[index];
  std::fill_n(t.digests + first, count, t.zero_digest);
}

void DigestTable::RecordPlaced(size_t index, uint64_t first, uint64_t count,
                               const uint8_t* src) {
  const Table& t = tables_[index];
  for (uint64_t i = 0; i < count; ++i) {
    std::atomic_ref<uint64_t>(t.digests[first + i])
        .store(XXH3_64bits(src + i * t.page_size, t.page_size),
               std::memory_order_relaxed);
  }
}

void DigestTable::RecordZeroPlaced(size_t index, uint64_t first,
                                   uint64_t count) {
  const Table& t = tables_[index];
  for (uint64_t i = 0; i < count; ++i) {
    std::atomic_ref<uint64_t>(t.digests[first + i])
        .store(t.zero_digest, std::memory_order_relaxed);
  }
}

void DigestTable::HashPages(size_t index, uint64_t first, uint64_t count) {
  const Table& t = tables_[index];
  if (t.region.fd >= 0) {
    // A piece at a time into a buffer of the thread's, hashed from cache.
    constexpr uint64_t kPieceBytes = 256u << 10;
    thread_local std::vector<uint8_t> piece;
    const uint64_t per = std::max<uint64_t>(1, kPieceBytes / t.page_size);
    piece.resize(per * t.page_size);
    for (uint64_t at = first; at < first + count; at += per) {
      const uint64_t n = std::min(per, first + count - at);
      const uint64_t offset = at * t.page_size;
      const iovec run{nullptr, n * t.page_size};
      // Best effort: a piece the file does not give is read from memory.
      const bool read =
          ReadRuns(t.region, {&offset, 1}, {&run, 1}, piece.data()).ok();
      for (uint64_t i = 0; i < n; ++i) {
        const uint8_t* page = read ? piece.data() + i * t.page_size
                                   : t.base + (at + i) * t.page_size;
        t.digests[at + i] = XXH3_64bits(page, t.page_size);
      }
    }
    return;
  }
  for (uint64_t p = first; p < first + count; ++p) {
    t.digests[p] = XXH3_64bits(t.base + p * t.page_size, t.page_size);
  }
}

absl::StatusOr<std::unique_ptr<FrozenDigests>> FrozenDigests::Create(
    absl::Span<const Region> regions) {
  RAMFERRY_ASSIGN_OR_RETURN(std::unique_ptr<DigestTable> table,
                            DigestTable::Create(regions));
  std::unique_ptr<FrozenDigests> d(new FrozenDigests());
  d->table_ = std::move(table);
  for (const Region& r : regions) {
    d->recorded_.push_back(std::make_unique<AtomicPageSet>(r.page_count()));
    d->page_sizes_.push_back(r.page_size);
  }
  return d;
}

void FrozenDigests::Record(size_t index, absl::Span<const uint64_t> run_offsets,
                           absl::Span<const iovec> runs) {
  table_->Record(index, run_offsets, runs);
  for (size_t i = 0; i < runs.size(); ++i) {
    recorded_[index]->SetRange(run_offsets[i] / page_sizes_[index],
                               runs[i].iov_len / page_sizes_[index]);
  }
}

void FrozenDigests::RecordZero(size_t index, uint64_t first, uint64_t count) {
  table_->RecordZero(index, first, count);
  recorded_[index]->SetRange(first, count);
}

absl::StatusOr<std::unique_ptr<BackgroundDigests>> BackgroundDigests::Start(
    absl::Span<const Region> regions, int threads, const FrozenDigests* known) {
  RAMFERRY_ASSIGN_OR_RETURN(std::unique_ptr<DigestTable> table,
                            DigestTable::Create(regions));
  std::unique_ptr<BackgroundDigests> d(new BackgroundDigests(std::move(table)));
  // Slices small enough to spread evenly, big enough to cost nothing to
  // hand out: 64 MiB of 4 KiB pages.
  constexpr uint64_t kSliceBytes = 64u << 20;
  for (size_t i = 0; i < regions.size(); ++i) {
    const Region& r = regions[i];
    const uint64_t per = std::max<uint64_t>(1, kSliceBytes / r.page_size);
    auto slice = [&](uint64_t from, uint64_t to) {
      for (uint64_t first = from; first < to; first += per) {
        d->slices_.push_back({i, first, std::min(per, to - first)});
      }
    };
    auto hash = [&](uint64_t from, uint64_t to) {
      if (known == nullptr) return slice(from, to);
      const AtomicPageSet& have = known->recorded(i);
      for (uint64_t p = have.NextClear(from, to); p < to;) {
        const uint64_t end = have.NextSet(p, to);
        slice(p, end);
        p = have.NextClear(end, to);
      }
    };
    // Pages that hold nothing are zero without being read: reading a
    // hole of a shared file would allocate a page there. Best effort: a
    // region the kernel cannot describe is read whole.
    absl::StatusOr<std::vector<ByteRange>> holes = FindUntouchedRanges(r);
    uint64_t at = 0;
    for (const ByteRange& h : holes.ok() ? *holes : std::vector<ByteRange>{}) {
      const uint64_t first = h.offset / r.page_size;
      const uint64_t count = h.length / r.page_size;
      hash(at, first);
      d->table_->RecordZero(i, first, count);
      at = first + count;
    }
    hash(at, r.page_count());
  }
  if (threads <= 0) {
    threads =
        static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  for (int t = 0; t < threads; ++t) {
    d->threads_.emplace_back([raw = d.get()] {
      sched_param none{};
      // Best effort: at normal priority the threads still hash, only
      // sooner at the cost of what they overlap.
      pthread_setschedparam(pthread_self(), SCHED_IDLE, &none);
      raw->Work();
    });
  }
  return d;
}

BackgroundDigests::~BackgroundDigests() {
  next_.store(slices_.size());  // nothing more for anyone
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void BackgroundDigests::Work() {
  for (size_t i = next_.fetch_add(1); i < slices_.size();
       i = next_.fetch_add(1)) {
    table_->HashPages(slices_[i].region, slices_[i].first, slices_[i].count);
  }
}

void BackgroundDigests::Finish() {
  Work();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

}  // namespace ramferry::engine
