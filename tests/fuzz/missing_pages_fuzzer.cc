// Fuzzes DecodeMissingPages: the set of pages a post-copy destination
// drops, so a bad range would discard (or fail to discard) the wrong pages
// of a running workload.
//
// Properties: an accepted message names a region of the table, its ranges
// are canonical and inside that region; it re-encodes to the payload byte
// for byte; split into one-range messages it passes MissingPagesChecker,
// and the checker's page count is the ranges' sum.
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/postcopy.h"
#include "tests/fuzz/control_round_trip.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzMissingPages(absl::Span<const uint8_t> in) {
  static const std::vector<proto::RegionInfo> table = FuzzMissingPagesTable();
  absl::StatusOr<proto::MissingPages> m = proto::DecodeMissingPages(in, table);
  if (!m.ok()) return;
  const proto::RegionInfo* region = nullptr;
  for (const proto::RegionInfo& r : table) {
    if (r.id == m->region_id) region = &r;
  }
  FUZZ_CHECK(region != nullptr);
  const uint64_t pages = region->length / region->page_size;
  FUZZ_CHECK(proto::ValidatePageRanges(m->ranges, pages, 0, "fuzz").ok());
  uint64_t sum = 0;
  for (const proto::PageRange& r : m->ranges) {
    FUZZ_CHECK(r.count >= 1 && r.first < pages && r.count <= pages - r.first);
    sum += r.count;
  }
  FUZZ_CHECK(!m->ranges.empty() || m->last);

  std::vector<uint8_t> out;
  proto::EncodeMissingPages(*m, &out);
  FUZZ_CHECK(SameBytes(out, in));

  proto::MissingPagesChecker checker(table);
  for (const proto::MissingPages& piece :
       proto::SplitMissingPages(m->region_id, m->ranges, 1)) {
    std::vector<uint8_t> bytes;
    proto::EncodeMissingPages(piece, &bytes);
    absl::StatusOr<proto::MissingPages> again =
        proto::DecodeMissingPages(bytes, table);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(*again == piece);
    FUZZ_CHECK(checker.Accept(*again).ok());
  }
  FUZZ_CHECK(checker.missing_pages() == sum);
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzMissingPages({data, size});
  return 0;
}
