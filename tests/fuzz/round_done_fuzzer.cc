// Fuzzes DecodeRoundDone, the destination's confirmation of a round.
//
// Property: an accepted message re-encodes to the payload byte for byte.
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/control.h"
#include "tests/fuzz/control_round_trip.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzRoundDone(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::RoundDone> d = proto::DecodeRoundDone(in);
  if (!d.ok()) return;
  std::vector<uint8_t> frame = proto::EncodeRoundDone(*d);
  absl::Span<const uint8_t> payload =
      EncodedPayload(frame, proto::ControlType::kRoundDone);
  FUZZ_CHECK(SameBytes(payload, in));
  absl::StatusOr<proto::RoundDone> again = proto::DecodeRoundDone(payload);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->round == d->round && again->pages == d->pages);
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzRoundDone({data, size});
  return 0;
}
