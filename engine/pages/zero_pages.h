// The destination's side of zero pages: makes a page zero when the source
// says it is, and writes nothing where the page already reads as zero.
#ifndef RAMFERRY_ENGINE_PAGES_ZERO_PAGES_H_
#define RAMFERRY_ENGINE_PAGES_ZERO_PAGES_H_

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/region.h"

namespace ramferry::engine {

class ZeroPages {
 public:
  // For each region with Region::reads_as_zero, a bitmap of the pages data
  // landed on (one bit per page, 32 KiB per GiB of 4 KiB pages): a zero
  // page that lands on a page with its bit clear still reads as zero, so
  // nothing is written, and destination memory nobody wrote stays
  // unallocated. Any other region's zero pages are read first and written
  // only where they are not zero already, which dirties no page that is.
  explicit ZeroPages(absl::Span<const Region> regions);

  // Data landed on `runs` of region `index`, from region offsets
  // `run_offsets` (what BuildPageRuns made; only the lengths of `runs`
  // are read). Called before the round that carried it is confirmed, so
  // a later round's zero page for the same page sees the bit.
  void NoteData(size_t index, absl::Span<const uint64_t> run_offsets,
                absl::Span<const iovec> runs);

  struct Applied {
    uint64_t written = 0;  // pages that had to be zero-filled
    uint64_t skipped = 0;  // pages left alone: they read as zero
  };
  // Makes pages [first, first + count) of region `index` zero. Fails
  // only where a region with a file (Region::fd) cannot be read or
  // written through it.
  absl::StatusOr<Applied> Zero(size_t index, uint64_t first, uint64_t count);

 private:
  struct Tracked {
    Region region;
    std::unique_ptr<DirtyBitmap> data;  // null: not known to read as zero
  };
  // Pages [first, first + count) of a region not known to read as zero:
  // a run long enough goes through the region's file
  // (engine/pages/region_file.h) where it has one, the rest through the
  // mapping.
  static absl::StatusOr<Applied> ZeroUnknown(const Region& r, uint64_t first,
                                             uint64_t count);
  static absl::StatusOr<Applied> ZeroUnknownInFile(const Region& r,
                                                   uint64_t first,
                                                   uint64_t count);

  std::vector<Tracked> regions_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_PAGES_ZERO_PAGES_H_
