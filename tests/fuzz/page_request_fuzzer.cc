// Fuzzes DecodePageRequest: the pages a post-copy destination's threads
// block on, which the source answers from its memory, so an accepted
// request must name only pages inside a 4 KiB region of the table.
//
// Properties: an accepted request names a region of the table with 4 KiB
// pages; it holds 1 to kMaxPageRequestPages pages, strictly ascending,
// each inside that region; it re-encodes (EncodePageRequest, minus the
// frame header) to the payload byte for byte, and the frame header names
// PAGE_REQUEST and the payload's length.
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "base/page_size.h"
#include "proto/postcopy.h"
#include "tests/fuzz/control_round_trip.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzPageRequest(absl::Span<const uint8_t> in) {
  static const std::vector<proto::RegionInfo> table = FuzzMissingPagesTable();
  absl::StatusOr<proto::PageRequest> q = proto::DecodePageRequest(in, table);
  if (!q.ok()) return;
  const proto::RegionInfo* region = nullptr;
  for (const proto::RegionInfo& r : table) {
    if (r.id == q->region_id) region = &r;
  }
  FUZZ_CHECK(region != nullptr);
  FUZZ_CHECK(region->page_size == base::kSmallPageSize);
  const uint64_t pages = region->length / region->page_size;
  FUZZ_CHECK(!q->pages.empty());
  FUZZ_CHECK(q->pages.size() <= proto::kMaxPageRequestPages);
  for (size_t i = 0; i < q->pages.size(); ++i) {
    FUZZ_CHECK(q->pages[i] < pages);
    FUZZ_CHECK(i == 0 || q->pages[i] > q->pages[i - 1]);
  }

  const std::vector<uint8_t> frame = proto::EncodePageRequest(*q);
  FUZZ_CHECK(frame.size() == proto::kFrameHeaderBytes + in.size());
  absl::StatusOr<proto::FrameHeader> h = proto::DecodeFrameHeader(frame);
  FUZZ_CHECK(h.ok());
  FUZZ_CHECK(h->type == proto::ControlType::kPageRequest);
  FUZZ_CHECK(h->length == in.size());
  const std::vector<uint8_t> payload(frame.begin() + proto::kFrameHeaderBytes,
                                     frame.end());
  FUZZ_CHECK(SameBytes(payload, in));
  absl::StatusOr<proto::PageRequest> again =
      proto::DecodePageRequest(payload, table);
  FUZZ_CHECK(again.ok() && *again == *q);
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzPageRequest({data, size});
  return 0;
}
