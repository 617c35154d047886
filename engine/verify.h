// Page digests for end-to-end verification: both ends hash every page the
// same way and compare.
#ifndef RAMFERRY_ENGINE_VERIFY_H_
#define RAMFERRY_ENGINE_VERIFY_H_

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/pages/atomic_page_set.h"
#include "engine/pages/landings.h"
#include "ramferry/region.h"

namespace ramferry::engine {

// XXH3-64 of each page in [first, first + out.size()) of `region`.
void PageDigests(const Region& region, uint64_t first_page,
                 absl::Span<uint64_t> out);

// One digest per page of each region, written as pages move: by the
// destination's channel threads as pages land, or by the source's as
// pages leave. A page is in one batch per round and rounds are ordered by
// the round barrier, so no two threads write one entry concurrently.
// Storage is reserved address space (8 bytes per page) that the kernel
// backs only where digests are written.
class DigestTable : public LandingDigests {
 public:
  // Fails only when the address space cannot be reserved.
  static absl::StatusOr<std::unique_ptr<DigestTable>> Create(
      absl::Span<const Region> regions);
  ~DigestTable() override;
  DigestTable(const DigestTable&) = delete;
  DigestTable& operator=(const DigestTable&) = delete;

  // Hashes the pages of `runs` and records their digests: run i holds
  // the pages of region `index` from region offset run_offsets[i], in
  // the region's memory (as BuildPageRuns makes them) or in a copy of it.
  void Record(size_t index, absl::Span<const uint64_t> run_offsets,
              absl::Span<const iovec> runs) override;
  // Records pages [first, first + count) of region `index` as all zero,
  // without reading them (they travelled as zero pages, and the
  // destination may not have touched them at all).
  void RecordZero(size_t index, uint64_t first, uint64_t count) override;
  // Post-copy placement: records pages [first, first + count) of region
  // `index` as the `count` pages at `src` (outside the region) hold them,
  // or as zero. Two placement paths may race for one page; only the one
  // that placed it records it, but the stores are atomic all the same, so
  // a reader synchronised with the placement never sees a torn entry.
  void RecordPlaced(size_t index, uint64_t first, uint64_t count,
                    const uint8_t* src) override;
  void RecordZeroPlaced(size_t index, uint64_t first, uint64_t count) override;
  // Hashes pages [first, first + count) of region `index` from memory:
  // through the region's file where it has one (Region::fd), so pages
  // this process never touched are not faulted into its page tables.
  void HashPages(size_t index, uint64_t first, uint64_t count);
  absl::Span<const uint64_t> region(size_t index) const {
    return {tables_[index].digests, tables_[index].pages};
  }

 private:
  struct Table {
    Region region;  // for its file
    const uint8_t* base = nullptr;
    uint32_t page_size = 0;
    uint64_t pages = 0;
    uint64_t zero_digest = 0;  // of a page_size run of zero bytes
    uint64_t* digests = nullptr;
    size_t mapped = 0;
  };
  DigestTable() = default;
  std::vector<Table> tables_;
};

// Source, VerifyMode::kFull: the digests of pages sent after the caller
// said its memory no longer changes (Sender::NoteMemoryFrozen). Such a
// page holds until the end what it held when it was sent, so its digest
// taken then, in the pass that sealed or sent it and from cache, is what
// Verify would get by reading it again; Verify reads only the pages not
// recorded here. Channel threads record (one batch per page at a time);
// Verify reads once the rounds are confirmed.
class FrozenDigests {
 public:
  static absl::StatusOr<std::unique_ptr<FrozenDigests>> Create(
      absl::Span<const Region> regions);

  // As DigestTable's, and marks the pages recorded.
  void Record(size_t index, absl::Span<const uint64_t> run_offsets,
              absl::Span<const iovec> runs);
  void RecordZero(size_t index, uint64_t first, uint64_t count);

  bool Has(size_t index, uint64_t page) const {
    return recorded_[index]->Test(page);
  }
  const AtomicPageSet& recorded(size_t index) const {
    return *recorded_[index];
  }
  const DigestTable& digests() const { return *table_; }

 private:
  FrozenDigests() = default;
  std::unique_ptr<DigestTable> table_;
  std::vector<std::unique_ptr<AtomicPageSet>> recorded_;
  std::vector<uint32_t> page_sizes_;
};

// Every page of a set of regions hashed by background threads while the
// caller does other work (the final round is sent), then finished with the
// caller's help. Pages that hold nothing (engine/untouched.h) are recorded
// as zero without being read. The threads run at SCHED_IDLE: they take only CPU
// that nothing else wants, so the work they overlap is not slowed. The memory
// must not change from construction on.
class BackgroundDigests {
 public:
  // Pages `known` holds (null: none) are left out: their digests are
  // there, and digests() leaves them unset.
  static absl::StatusOr<std::unique_ptr<BackgroundDigests>> Start(
      absl::Span<const Region> regions, int threads = 0,
      const FrozenDigests* known = nullptr);
  ~BackgroundDigests();
  BackgroundDigests(const BackgroundDigests&) = delete;
  BackgroundDigests& operator=(const BackgroundDigests&) = delete;

  // Hashes what is left on the calling thread too, then waits for the
  // background threads. The digests are complete afterwards.
  void Finish();
  const DigestTable& digests() const { return *table_; }

 private:
  struct Slice {
    size_t region;
    uint64_t first, count;
  };
  explicit BackgroundDigests(std::unique_ptr<DigestTable> table)
      : table_(std::move(table)) {}
  void Work();  // takes slices until none is left

  std::unique_ptr<DigestTable> table_;
  std::vector<Slice> slices_;
  std::atomic<size_t> next_{0};
  std::vector<std::thread> threads_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_VERIFY_H_
