// Fuzzes DecodeRegionReply, the destination's verdict on the region table;
// a refusal's reason ends up in the source's error.
//
// Properties: an accepted reply has a printable reason; re-encoding it
// gives back the payload byte for byte.
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/control.h"
#include "tests/fuzz/control_round_trip.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzRegionReply(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::RegionReply> r = proto::DecodeRegionReply(in);
  if (!r.ok()) return;
  for (char c : r->reason) FUZZ_CHECK(c >= 0x20 && c <= 0x7e);

  std::vector<uint8_t> frame = proto::EncodeRegionReply(*r);
  absl::Span<const uint8_t> payload =
      EncodedPayload(frame, proto::ControlType::kRegionReply);
  FUZZ_CHECK(SameBytes(payload, in));
  absl::StatusOr<proto::RegionReply> again = proto::DecodeRegionReply(payload);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->accepted == r->accepted && again->reason == r->reason);
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzRegionReply({data, size});
  return 0;
}
