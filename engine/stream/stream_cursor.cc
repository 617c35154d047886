#include "engine/stream/stream_cursor.h"

#include "absl/strings/str_format.h"

namespace ramferry::engine {

absl::StatusOr<absl::Span<const uint8_t>> StreamCursor::Take(
    const proto::StreamFrame& frame, absl::Span<const uint8_t> payload) {
  if (frame.stream != stream_ || payload.size() != frame.bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stream %d: a packet of stream %d with %d of its %d bytes", stream_,
        frame.stream, payload.size(), frame.bytes));
  }
  if (ended_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stream %d: a packet at offset %d after its end at %d",
                        stream_, frame.offset, delivered_));
  }
  if (frame.end) {
    if (frame.offset != delivered_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("stream %d: its end says %d bytes, but %d came",
                          stream_, frame.offset, delivered_));
    }
    ended_ = true;
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
  delivered_ = frame.offset + payload.size();
  return payload.subspan(seen);
}

}  // namespace ramferry::engine
