// Fuzzes DecodeChannelLoss and DecodeChannelGoneAck, the messages that let
// a session go on without a dead data channel: their channel index and
// round move the destination's round barrier, and their text ends up in
// the report. The first input byte picks CHANNEL_LOST, CHANNEL_GONE or
// CHANNEL_GONE_ACK.
//
// Properties: an accepted message names a channel (not kNoChannel); a loss
// carries a real error code and printable text of bounded length, and
// ChannelLossStatus keeps that code; decode(encode(decode(x))) equals
// decode(x).
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/control.h"
#include "tests/fuzz/control_round_trip.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzLoss(proto::ControlType type, absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::ChannelLoss> l = proto::DecodeChannelLoss(type, in);
  if (!l.ok()) return;
  FUZZ_CHECK(l->channel != proto::kNoChannel);
  FUZZ_CHECK(l->code >= 1 &&
             l->code <=
                 static_cast<uint16_t>(absl::StatusCode::kUnauthenticated));
  FUZZ_CHECK(l->text.size() <= proto::kMaxErrorTextBytes);
  for (char c : l->text) FUZZ_CHECK(c >= 0x20 && c <= 0x7e);
  absl::Status s = proto::ChannelLossStatus(*l);
  FUZZ_CHECK(static_cast<uint16_t>(s.code()) == l->code);

  std::vector<uint8_t> frame = type == proto::ControlType::kChannelLost
                                   ? proto::EncodeChannelLost(*l)
                                   : proto::EncodeChannelGone(*l);
  absl::StatusOr<proto::ChannelLoss> again =
      proto::DecodeChannelLoss(type, EncodedPayload(frame, type));
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->channel == l->channel && again->round == l->round &&
             again->code == l->code && again->text == l->text);
}

void FuzzGoneAck(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::ChannelGoneAck> a = proto::DecodeChannelGoneAck(in);
  if (!a.ok()) return;
  FUZZ_CHECK(a->channel != proto::kNoChannel);
  std::vector<uint8_t> frame = proto::EncodeChannelGoneAck(*a);
  absl::Span<const uint8_t> payload =
      EncodedPayload(frame, proto::ControlType::kChannelGoneAck);
  FUZZ_CHECK(SameBytes(payload, in));  // a fixed layout: byte for byte
  absl::StatusOr<proto::ChannelGoneAck> again =
      proto::DecodeChannelGoneAck(payload);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->channel == a->channel && again->round == a->round);
}

void FuzzChannelLoss(absl::Span<const uint8_t> in) {
  if (in.empty()) return;
  const uint8_t which = in[0] % 3;
  in.remove_prefix(1);
  switch (which) {
    case 0:
      return FuzzLoss(proto::ControlType::kChannelLost, in);
    case 1:
      return FuzzLoss(proto::ControlType::kChannelGone, in);
    default:
      return FuzzGoneAck(in);
  }
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzChannelLoss({data, size});
  return 0;
}
