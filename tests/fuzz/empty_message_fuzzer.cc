// Fuzzes DecodeEmpty, the check for the payload-less control messages
// (FINISH, FINISH_ACK). The first input byte picks the type.
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
  const proto::ControlType type = (in[0] & 1) ? proto::ControlType::kFinishAck
                                              : proto::ControlType::kFinish;
  in.remove_prefix(1);
  absl::Status s = proto::DecodeEmpty(type, in);
  FUZZ_CHECK(s.ok() == in.empty());
  if (!s.ok()) return;

  std::vector<uint8_t> frame = type == proto::ControlType::kFinish
                                   ? proto::EncodeFinish()
                                   : proto::EncodeFinishAck();
  FUZZ_CHECK(proto::DecodeEmpty(type, EncodedPayload(frame, type)).ok());
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzEmptyMessage({data, size});
  return 0;
}
