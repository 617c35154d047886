// Round-trip helpers for the control-message targets: every encoder returns
// a whole frame, so its header is checked and its payload decoded again.
#ifndef RAMFERRY_TESTS_FUZZ_CONTROL_ROUND_TRIP_H_
#define RAMFERRY_TESTS_FUZZ_CONTROL_ROUND_TRIP_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/control.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {

// The payload of an encoded frame, after checking that its header names
// `type` and the payload's true length, and that the receiving side's frame
// check accepts it (an encoder must not produce what the peer refuses).
inline absl::Span<const uint8_t> EncodedPayload(
    const std::vector<uint8_t>& frame, proto::ControlType type) {
  FUZZ_CHECK(frame.size() >= proto::kFrameHeaderBytes);
  absl::StatusOr<proto::FrameHeader> h = proto::DecodeFrameHeader(frame);
  FUZZ_CHECK(h.ok());
  FUZZ_CHECK(h->type == type);
  FUZZ_CHECK(h->length == frame.size() - proto::kFrameHeaderBytes);
  return absl::MakeConstSpan(frame).subspan(proto::kFrameHeaderBytes);
}

// The encoder's frame for a payload-less type.
inline std::vector<uint8_t> EncodeEmpty(proto::ControlType type) {
  switch (type) {
    case proto::ControlType::kFinish:
      return proto::EncodeFinish();
    case proto::ControlType::kFinishAck:
      return proto::EncodeFinishAck();
    case proto::ControlType::kHeartbeat:
      return proto::EncodeHeartbeat();
    default:
      FUZZ_CHECK(false && "not a payload-less control type");
      return {};
  }
}

inline bool SameBytes(absl::Span<const uint8_t> a,
                      absl::Span<const uint8_t> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

}  // namespace ramferry::fuzz

#endif  // RAMFERRY_TESTS_FUZZ_CONTROL_ROUND_TRIP_H_
