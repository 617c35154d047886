// Fuzzes DecodePageData: an answer to a post-copy page request, whose
// bytes the destination places into its memory with UFFDIO_COPY, so an
// accepted message must name a run inside a 4 KiB region and carry exactly
// its bytes.
//
// Properties: an accepted message names a region of the table with 4 KiB
// pages and a run of 1 to kMaxPageDataPages pages inside it; its bytes are
// the payload after the fixed part, page_count x 4 KiB of them (none when
// zero); it re-encodes (EncodePageData, minus the frame header) to the
// payload byte for byte.
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "base/page_size.h"
#include "proto/postcopy.h"
#include "tests/fuzz/control_round_trip.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzPageData(absl::Span<const uint8_t> in) {
  static const std::vector<proto::RegionInfo> table = FuzzMissingPagesTable();
  absl::StatusOr<proto::PageData> d = proto::DecodePageData(in, table);
  if (!d.ok()) return;
  const proto::RegionInfo* region = nullptr;
  for (const proto::RegionInfo& r : table) {
    if (r.id == d->region_id) region = &r;
  }
  FUZZ_CHECK(region != nullptr);
  FUZZ_CHECK(region->page_size == base::kSmallPageSize);
  const uint64_t pages = region->length / region->page_size;
  FUZZ_CHECK(d->page_count >= 1 && d->page_count <= proto::kMaxPageDataPages);
  FUZZ_CHECK(d->first_page < pages && d->page_count <= pages - d->first_page);
  const size_t want =
      d->zero ? 0 : size_t{d->page_count} * base::kSmallPageSize;
  FUZZ_CHECK(d->bytes.size() == want);
  FUZZ_CHECK(in.size() == proto::kPageDataFixedBytes + want);
  FUZZ_CHECK(want == 0 ||
             d->bytes.data() == in.data() + proto::kPageDataFixedBytes);

  const std::vector<uint8_t> frame =
      proto::EncodePageData(d->region_id, d->first_page, d->page_count,
                            d->zero ? nullptr : d->bytes.data());
  FUZZ_CHECK(frame.size() == proto::kFrameHeaderBytes + in.size());
  absl::StatusOr<proto::FrameHeader> h = proto::DecodeFrameHeader(frame);
  FUZZ_CHECK(h.ok());
  FUZZ_CHECK(h->type == proto::ControlType::kPageData);
  FUZZ_CHECK(h->length == in.size());
  const std::vector<uint8_t> payload(frame.begin() + proto::kFrameHeaderBytes,
                                     frame.end());
  FUZZ_CHECK(SameBytes(payload, in));
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzPageData({data, size});
  return 0;
}
