// Fuzzes DecodeVerifyRequest: the source asks the destination to digest a
// run of pages, so the page count bounds the destination's work.
//
// Properties: an accepted request asks for 1..kMaxVerifyPages pages and
// re-encodes to the payload byte for byte.
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/control.h"
#include "tests/fuzz/control_round_trip.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzVerifyRequest(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::VerifyRequest> q = proto::DecodeVerifyRequest(in);
  if (!q.ok()) return;
  FUZZ_CHECK(q->page_count >= 1 && q->page_count <= proto::kMaxVerifyPages);

  std::vector<uint8_t> frame = proto::EncodeVerifyRequest(*q);
  absl::Span<const uint8_t> payload =
      EncodedPayload(frame, proto::ControlType::kVerifyRequest);
  FUZZ_CHECK(SameBytes(payload, in));
  absl::StatusOr<proto::VerifyRequest> again =
      proto::DecodeVerifyRequest(payload);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->region_id == q->region_id &&
             again->first_page == q->first_page &&
             again->page_count == q->page_count);
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzVerifyRequest({data, size});
  return 0;
}
