#include "engine/stream/stream_cursor.h"

#include "absl/strings/str_format.h"

namespace ramferry::engine {

absl::StatusOr<absl::Span<const uint8_t>> StreamCursor::Fresh(
    const proto::StreamFrame& frame, absl::Span<const uint8_t> payload) const {
  if (frame.stream != stream_ || payload.size() != frame.bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stream %d: a packet of stream %d with %d of its %d bytes", stream_,
        frame.stream, payload.size(), frame.bytes));
  }
  if (frame.end) {
    if (frame.offset != delivered_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("stream %d: its end says %d bytes, but %d came",
                          stream_, frame.offset, delivered_));
    }
    return absl::Span<const uint8_t>();
  }
  if (frame.offset > delivered_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stream %d: a packet at offset %d leaves a gap after %d", stream_,
        frame.offset, delivered_));
  }
  // Sent again after a lost channel: only what lies past the delivered.
  const uint64_t seen = delivered_ - frame.offset;
  if (seen >= payload.size()) return absl::Span<const uint8_t>();
  if (ended_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stream %d: bytes past its end at %d (a packet at offset %d of %d "
        "bytes)",
        stream_, delivered_, frame.offset, frame.bytes));
  }
  return payload.subspan(seen);
}

absl::StatusOr<absl::Span<const uint8_t>> StreamCursor::Take(
    const proto::StreamFrame& frame, absl::Span<const uint8_t> payload) {
  absl::StatusOr<absl::Span<const uint8_t>> fresh = Fresh(frame, payload);
  if (!fresh.ok()) return fresh;
  Advance(fresh->size());
  if (frame.end) End();
  return fresh;
}

}  // namespace ramferry::engine
