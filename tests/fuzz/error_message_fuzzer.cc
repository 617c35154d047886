// Fuzzes DecodeError, the peer's account of why the session ends, which
// becomes this side's error status and log line.
//
// Properties: an accepted message has a real error code (not OK) and
// printable text, and ErrorMessageStatus keeps that code; decode(encode(
// decode(x))) equals decode(x). Not byte for byte: the decoder replaces
// unprintable text bytes with '?'.
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/control.h"
#include "tests/fuzz/control_round_trip.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzErrorMessage(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::ErrorMessage> e = proto::DecodeError(in);
  if (!e.ok()) return;
  FUZZ_CHECK(e->code >= 1 &&
             e->code <=
                 static_cast<uint16_t>(absl::StatusCode::kUnauthenticated));
  for (char c : e->text) FUZZ_CHECK(c >= 0x20 && c <= 0x7e);
  absl::Status s = proto::ErrorMessageStatus(*e);
  FUZZ_CHECK(!s.ok());
  FUZZ_CHECK(static_cast<uint16_t>(s.code()) == e->code);

  std::vector<uint8_t> frame = proto::EncodeError(*e);
  absl::Span<const uint8_t> payload =
      EncodedPayload(frame, proto::ControlType::kError);
  absl::StatusOr<proto::ErrorMessage> again = proto::DecodeError(payload);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->channel == e->channel && again->code == e->code &&
             again->text == e->text);
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzErrorMessage({data, size});
  return 0;
}
