// Fuzzes DecodeEmpty, the check for the payload-less control messages
// (FINISH, FINISH_ACK, HEARTBEAT). The first input byte picks the type.
//
// Properties: accepted exactly when the payload is empty, and the encoder's
// frame for the type decodes back to an accepted empty payload.
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "proto/control.h"
#include "tests/fuzz/control_round_trip.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzEmptyMessage(absl::Span<const uint8_t> in) {
  if (in.empty()) return;
  static constexpr proto::ControlType kTypes[] = {
      proto::ControlType::kFinish, proto::ControlType::kFinishAck,
      proto::ControlType::kHeartbeat};
  const proto::ControlType type = kTypes[in[0] % 3];
  in.remove_prefix(1);
  absl::Status s = proto::DecodeEmpty(type, in);
  FUZZ_CHECK(s.ok() == in.empty());
  if (!s.ok()) return;

  std::vector<uint8_t> frame = EncodeEmpty(type);
  FUZZ_CHECK(proto::DecodeEmpty(type, EncodedPayload(frame, type)).ok());
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzEmptyMessage({data, size});
  return 0;
}
