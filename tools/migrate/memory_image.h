// Memory images that look like real guests and processes: runs of zero
// pages, of pages never touched, of text-like (compressible) pages and of
// random pages, in the proportions asked for.
#ifndef RAMFERRY_TOOLS_MIGRATE_MEMORY_IMAGE_H_
#define RAMFERRY_TOOLS_MIGRATE_MEMORY_IMAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ramferry::migrate {

enum class PageKind : uint8_t { kZero, kUntouched, kText, kRandom };
inline constexpr int kPageKinds = 4;

// Percent of the pages of each kind; they sum to 100.
struct MemoryImage {
  uint32_t percent[kPageKinds] = {0, 0, 0, 100};
  // "zero=70,random=30"; a kind not named is 0; "random" means random=100.
  static absl::StatusOr<MemoryImage> Parse(absl::string_view text);
  std::string ToString() const;
  bool all_random() const { return percent[3] == 100; }
};

struct PageRun {
  uint64_t first = 0;
  uint64_t count = 0;
  PageKind kind = PageKind::kRandom;
};

// The image's layout over `pages` pages: runs whose lengths are spread
// log-uniformly over 1..512 pages (a guest's free and used memory comes
// in runs of every size, not page by page), each of a kind drawn so the
// page counts approach the percentages. Deterministic for a seed.
std::vector<PageRun> PlanImage(uint64_t pages, const MemoryImage& image,
                               uint64_t seed);

// Writes the planned runs into [base, base + pages * 4096): zero pages are
// written with zeros (allocated, as a guest's freed memory is), untouched
// pages are not touched at all (never faulted in: a hole in a file, no
// page in anonymous memory), text pages get words from a small vocabulary
// and random pages seeded random bytes. Returns the pages of each kind.
std::vector<uint64_t> FillImage(uint8_t* base, absl::Span<const PageRun> runs,
                                uint64_t seed, int threads = 2);

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_MEMORY_IMAGE_H_
