// Fuzzes DecodeVerifyResult, the destination's page digests that the
// source compares with its own.
//
// Properties: an accepted result carries at most kMaxVerifyPages digests,
// exactly as many as its payload holds, and re-encodes to the payload byte
// for byte.
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/control.h"
#include "tests/fuzz/control_round_trip.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzVerifyResult(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::VerifyResult> v = proto::DecodeVerifyResult(in);
  if (!v.ok()) return;
  FUZZ_CHECK(v->page_digests.size() <= proto::kMaxVerifyPages);
  FUZZ_CHECK(in.size() == 16 + 8 * v->page_digests.size());

  std::vector<uint8_t> frame = proto::EncodeVerifyResult(*v);
  absl::Span<const uint8_t> payload =
      EncodedPayload(frame, proto::ControlType::kVerifyResult);
  FUZZ_CHECK(SameBytes(payload, in));
  absl::StatusOr<proto::VerifyResult> again =
      proto::DecodeVerifyResult(payload);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->region_id == v->region_id &&
             again->first_page == v->first_page &&
             again->page_digests == v->page_digests);
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzVerifyResult({data, size});
  return 0;
}
