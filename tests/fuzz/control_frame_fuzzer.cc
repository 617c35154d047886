// Fuzzes the control connection the way both ends read it: DecodeFrameHeader
// on the first 8 bytes, then the payload handed to the decoder of the type
// the header names (as engine/sender_control.cc and engine/receiver.cc
// dispatch).
//
// Properties: an accepted header names a known type and its fields are the
// input bytes; a payload its type's decoder accepts re-encodes to a frame
// whose header the frame check accepts with the same type, so what one end
// accepts the other end can always send back.
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "base/status_macros.h"
#include "proto/control.h"
#include "proto/postcopy.h"
#include "proto/stream_control.h"
#include "proto/wire.h"
#include "tests/fuzz/control_round_trip.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

absl::Span<const proto::RegionInfo> PostcopyTable() {
  static const auto* table = new std::vector<proto::RegionInfo>{
      {.id = 1, .page_size = 4096, .length = 1ull << 30, .name = "ram"}};
  return *table;
}

// Decodes `payload` as `type` and, if accepted, re-encodes it.
absl::StatusOr<std::vector<uint8_t>> DecodeAndEncode(
    proto::ControlType type, absl::Span<const uint8_t> payload) {
  switch (type) {
    case proto::ControlType::kRegionTable: {
      auto m = proto::DecodeRegionTable(payload);
      if (!m.ok()) return m.status();
      return proto::EncodeRegionTable(*m);
    }
    case proto::ControlType::kRegionReply: {
      auto m = proto::DecodeRegionReply(payload);
      if (!m.ok()) return m.status();
      return proto::EncodeRegionReply(*m);
    }
    case proto::ControlType::kRoundDone: {
      auto m = proto::DecodeRoundDone(payload);
      if (!m.ok()) return m.status();
      return proto::EncodeRoundDone(*m);
    }
    case proto::ControlType::kError: {
      auto m = proto::DecodeError(payload);
      if (!m.ok()) return m.status();
      return proto::EncodeError(*m);
    }
    case proto::ControlType::kFinish:
    case proto::ControlType::kFinishAck:
    case proto::ControlType::kHeartbeat: {
      RAMFERRY_RETURN_IF_ERROR(proto::DecodeEmpty(type, payload));
      return EncodeEmpty(type);
    }
    case proto::ControlType::kVerifyRequest: {
      auto m = proto::DecodeVerifyRequest(payload);
      if (!m.ok()) return m.status();
      return proto::EncodeVerifyRequest(*m);
    }
    case proto::ControlType::kVerifyResult: {
      auto m = proto::DecodeVerifyResult(payload);
      if (!m.ok()) return m.status();
      return proto::EncodeVerifyResult(*m);
    }
    case proto::ControlType::kChannelLost:
    case proto::ControlType::kChannelGone: {
      auto m = proto::DecodeChannelLoss(type, payload);
      if (!m.ok()) return m.status();
      return type == proto::ControlType::kChannelLost
                 ? proto::EncodeChannelLost(*m)
                 : proto::EncodeChannelGone(*m);
    }
    case proto::ControlType::kChannelGoneAck: {
      auto m = proto::DecodeChannelGoneAck(payload);
      if (!m.ok()) return m.status();
      return proto::EncodeChannelGoneAck(*m);
    }
    case proto::ControlType::kPostcopyArmed:
    case proto::ControlType::kPostcopyComplete: {
      RAMFERRY_RETURN_IF_ERROR(proto::DecodeEmpty(type, payload));
      std::vector<uint8_t> frame = proto::StartFrame(type);
      proto::FinishFrame(frame);
      return frame;
    }
    // Post-copy's payloads are checked against a region table: one of
    // 4 KiB pages, as post-copy has (the postcopy fuzzers vary it).
    case proto::ControlType::kMissingPages: {
      auto m = proto::DecodeMissingPages(payload, PostcopyTable());
      if (!m.ok()) return m.status();
      return proto::EncodeMissingPagesFrame(*m);
    }
    case proto::ControlType::kPageRequest: {
      auto m = proto::DecodePageRequest(payload, PostcopyTable());
      if (!m.ok()) return m.status();
      return proto::EncodePageRequest(*m);
    }
    case proto::ControlType::kPageData: {
      auto m = proto::DecodePageData(payload, PostcopyTable());
      if (!m.ok()) return m.status();
      return proto::EncodePageData(m->region_id, m->first_page, m->page_count,
                                   m->zero ? nullptr : m->bytes.data());
    }
    // A session of streams (proto/stream_control.h).
    case proto::ControlType::kStreamOpen:
    case proto::ControlType::kStreamOpened: {
      auto m = proto::DecodeStreamId(payload);
      if (!m.ok()) return m.status();
      return type == proto::ControlType::kStreamOpen
                 ? proto::EncodeStreamOpen(*m)
                 : proto::EncodeStreamOpened(*m);
    }
    case proto::ControlType::kStreamBack: {
      auto m = proto::DecodeStreamBack(payload);
      if (!m.ok()) return m.status();
      return proto::EncodeStreamBack(m->stream, m->offset, m->bytes);
    }
    case proto::ControlType::kStreamBackEnd: {
      auto m = proto::DecodeStreamBackEnd(payload);
      if (!m.ok()) return m.status();
      return proto::EncodeStreamBackEnd(*m);
    }
    case proto::ControlType::kStreamAck: {
      auto m = proto::DecodeStreamAck(payload);
      if (!m.ok()) return m.status();
      return proto::EncodeStreamAck(*m);
    }
  }
  FUZZ_CHECK(false && "DecodeFrameHeader accepted an unknown type");
  return absl::InternalError("unreachable");
}

void FuzzControlFrame(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::FrameHeader> h = proto::DecodeFrameHeader(in);
  if (!h.ok()) return;
  FUZZ_CHECK(proto::Load32(in.data()) == static_cast<uint32_t>(h->type));
  FUZZ_CHECK(proto::Load32(in.data() + 4) == h->length);
  absl::Span<const uint8_t> rest = in.subspan(proto::kFrameHeaderBytes);
  if (rest.size() < h->length) return;  // the reader would wait for more

  absl::StatusOr<std::vector<uint8_t>> frame =
      DecodeAndEncode(h->type, rest.subspan(0, h->length));
  if (!frame.ok()) return;
  absl::Span<const uint8_t> payload = EncodedPayload(*frame, h->type);
  FUZZ_CHECK(DecodeAndEncode(h->type, payload).ok());
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzControlFrame({data, size});
  return 0;
}
