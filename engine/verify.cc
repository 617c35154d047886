#include "engine/verify.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_format.h"

namespace ramferry::engine {

void PageDigests(const Region& region, uint64_t first_page,
                 absl::Span<uint64_t> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = XXH3_64bits(region.page(first_page + i), region.page_size);
  }
}

void PageDigestsParallel(const Region& region, uint64_t first_page,
                         absl::Span<uint64_t> out, int threads) {
  if (threads <= 0) {
    threads =
        static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  // Below this a thread costs more than it saves.
  constexpr size_t kMinPagesPerThread = 4096;
  const size_t n = std::min<size_t>(
      threads, std::max<size_t>(1, out.size() / kMinPagesPerThread));
  if (n <= 1) return PageDigests(region, first_page, out);
  std::vector<std::thread> pool;
  pool.reserve(n - 1);
  const size_t per = (out.size() + n - 1) / n;
  for (size_t t = 1; t < n; ++t) {
    const size_t from = std::min(out.size(), t * per);
    const size_t count = std::min(per, out.size() - from);
    pool.emplace_back([&region, first_page, out, from, count] {
      PageDigests(region, first_page + from, out.subspan(from, count));
    });
  }
  PageDigests(region, first_page, out.subspan(0, std::min(per, out.size())));
  for (std::thread& t : pool) t.join();
}

absl::StatusOr<std::unique_ptr<DigestTable>> DigestTable::Create(
    absl::Span<const Region> regions) {
  std::unique_ptr<DigestTable> d(new DigestTable());
  d->tables_.reserve(regions.size());
  for (const Region& r : regions) {
    Table t;
    t.base = static_cast<const uint8_t*>(r.base);
    t.page_size = r.page_size;
    t.pages = r.page_count();
    t.mapped = std::max<size_t>(1, t.pages) * sizeof(uint64_t);
    void* m = mmap(nullptr, t.mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "cannot reserve %d bytes for the page digests of region %d: %s",
          t.mapped, r.id, strerror(errno)));
    }
    t.digests = static_cast<uint64_t*>(m);
    d->tables_.push_back(t);
  }
  return d;
}

DigestTable::~DigestTable() {
  for (const Table& t : tables_) munmap(t.digests, t.mapped);
}

void DigestTable::Record(size_t index, absl::Span<const iovec> runs) {
  const Table& t = tables_[index];
  for (const iovec& run : runs) {
    const auto* p = static_cast<const uint8_t*>(run.iov_base);
    uint64_t page = static_cast<uint64_t>(p - t.base) / t.page_size;
    for (size_t done = 0; done < run.iov_len; done += t.page_size) {
      t.digests[page++] = XXH3_64bits(p + done, t.page_size);
    }
  }
}

}  // namespace ramferry::engine
