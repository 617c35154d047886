#include "proto/stream_control.h"

#include "absl/strings/str_format.h"
#include "proto/control.h"
#include "proto/stream.h"
#include "proto/wire.h"

namespace ramferry::proto {
namespace {

std::vector<uint8_t> IdFrame(ControlType type, uint32_t stream) {
  std::vector<uint8_t> frame = StartFrame(type);
  WireWriter(&frame).U32(stream);
  FinishFrame(frame);
  return frame;
}

absl::Status CheckStream(uint32_t stream, const char* what) {
  if (stream >= kMaxStreams) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s names stream %d; streams are numbered below %d",
                        what, stream, kMaxStreams));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<uint8_t> EncodeStreamOpen(uint32_t stream) {
  return IdFrame(ControlType::kStreamOpen, stream);
}

std::vector<uint8_t> EncodeStreamOpened(uint32_t stream) {
  return IdFrame(ControlType::kStreamOpened, stream);
}

std::vector<uint8_t> EncodeStreamBack(uint32_t stream, uint64_t offset,
                                      absl::Span<const uint8_t> bytes) {
  std::vector<uint8_t> frame = StartFrame(ControlType::kStreamBack);
  frame.reserve(frame.size() + 12 + bytes.size());
  WireWriter w(&frame);
  w.U32(stream);
  w.U64(offset);
  w.Bytes(bytes);
  FinishFrame(frame);
  return frame;
}

std::vector<uint8_t> EncodeStreamBackEnd(const StreamBackEnd& end) {
  std::vector<uint8_t> frame = StartFrame(ControlType::kStreamBackEnd);
  WireWriter w(&frame);
  w.U32(end.stream);
  w.U64(end.length);
  FinishFrame(frame);
  return frame;
}

std::vector<uint8_t> EncodeStreamAck(const StreamAck& ack) {
  std::vector<uint8_t> frame = StartFrame(ControlType::kStreamAck);
  WireWriter w(&frame);
  w.U32(ack.stream);
  w.U64(ack.offset);
  w.U32(ack.end ? kStreamAckEnd : 0);
  FinishFrame(frame);
  return frame;
}

absl::StatusOr<StreamAck> DecodeStreamAck(absl::Span<const uint8_t> payload) {
  if (payload.size() != 16) {
    return absl::InvalidArgumentError(
        absl::StrFormat("STREAM_ACK of %d bytes; want 16", payload.size()));
  }
  const uint32_t flags = Load32(payload.data() + 12);
  StreamAck ack{.stream = Load32(payload.data()),
                .offset = Load64(payload.data() + 4),
                .end = (flags & kStreamAckEnd) != 0};
  if (absl::Status s = CheckStream(ack.stream, "STREAM_ACK"); !s.ok()) {
    return s;
  }
  if (ack.offset >= kMaxStreamOffset || (flags & ~kStreamAckEnd) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "STREAM_ACK offset %d flags %#x: want below 2^62 and flags 0 or 1",
        ack.offset, flags));
  }
  return ack;
}

absl::StatusOr<uint32_t> DecodeStreamId(absl::Span<const uint8_t> payload) {
  if (payload.size() != 4) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stream open message of %d bytes; want 4", payload.size()));
  }
  const uint32_t stream = Load32(payload.data());
  if (absl::Status s = CheckStream(stream, "stream open message"); !s.ok()) {
    return s;
  }
  return stream;
}

absl::StatusOr<StreamBack> DecodeStreamBack(absl::Span<const uint8_t> payload) {
  if (payload.size() <= 12 || payload.size() > 12 + kMaxStreamBackBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "STREAM_BACK of %d bytes; want 12 and 1 to %d bytes of the stream",
        payload.size(), kMaxStreamBackBytes));
  }
  StreamBack back{.stream = Load32(payload.data()),
                  .offset = Load64(payload.data() + 4),
                  .bytes = payload.subspan(12)};
  if (absl::Status s = CheckStream(back.stream, "STREAM_BACK"); !s.ok()) {
    return s;
  }
  if (back.offset >= kMaxStreamOffset) {
    return absl::InvalidArgumentError(
        absl::StrFormat("STREAM_BACK offset %d is past 2^62", back.offset));
  }
  return back;
}

absl::StatusOr<StreamBackEnd> DecodeStreamBackEnd(
    absl::Span<const uint8_t> payload) {
  if (payload.size() != 12) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "STREAM_BACK_END of %d bytes; want 12", payload.size()));
  }
  StreamBackEnd end{.stream = Load32(payload.data()),
                    .length = Load64(payload.data() + 4)};
  if (absl::Status s = CheckStream(end.stream, "STREAM_BACK_END"); !s.ok()) {
    return s;
  }
  if (end.length >= kMaxStreamOffset) {
    return absl::InvalidArgumentError(
        absl::StrFormat("STREAM_BACK_END length %d is past 2^62", end.length));
  }
  return end;
}

}  // namespace ramferry::proto
