// Page digests for end-to-end verification: both ends hash every page the
// same way and compare.
#ifndef RAMFERRY_ENGINE_VERIFY_H_
#define RAMFERRY_ENGINE_VERIFY_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ramferry/region.h"

namespace ramferry::engine {

// XXH3-64 of each page in [first, first + out.size()) of `region`.
void PageDigests(const Region& region, uint64_t first_page,
                 absl::Span<uint64_t> out);

// The same, split over `threads` threads (0: one per core); for a whole
// region at memory speed.
void PageDigestsParallel(const Region& region, uint64_t first_page,
                         absl::Span<uint64_t> out, int threads = 0);

// One digest per page of each region, written as pages move: by the
// destination's channel threads as pages land, or by the source's as
// pages leave. A page is in one batch per round and rounds are ordered by
// the round barrier, so no two threads write one entry concurrently.
// Storage is reserved address space (8 bytes per page) that the kernel
// backs only where digests are written.
class DigestTable {
 public:
  // Fails only when the address space cannot be reserved.
  static absl::StatusOr<std::unique_ptr<DigestTable>> Create(
      absl::Span<const Region> regions);
  ~DigestTable();
  DigestTable(const DigestTable&) = delete;
  DigestTable& operator=(const DigestTable&) = delete;

  // Hashes the pages that `runs` (contiguous spans of region `index`'s
  // memory, as BuildPageRuns makes them) cover and records their digests.
  void Record(size_t index, absl::Span<const iovec> runs);
  absl::Span<const uint64_t> region(size_t index) const {
    return {tables_[index].digests, tables_[index].pages};
  }

 private:
  struct Table {
    const uint8_t* base = nullptr;
    uint32_t page_size = 0;
    uint64_t pages = 0;
    uint64_t* digests = nullptr;
    size_t mapped = 0;
  };
  DigestTable() = default;
  std::vector<Table> tables_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_VERIFY_H_
