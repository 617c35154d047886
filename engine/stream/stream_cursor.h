// Where a carried byte stream stands at its destination: how many of its
// bytes were delivered, and whether its end came (proto/stream.h).
//
// Packets of one stream arrive in order on its channel, but after a lost
// channel the source sends again from the last offset the destination
// acknowledged, on another channel, so a packet may overlap what was
// delivered: only the bytes past it are new. A packet that starts past
// what was delivered (a gap), bytes past the end, or an end that does
// not match what came, is a protocol error: the peer is broken or
// forging, and nothing of the packet is delivered. A resend may come
// after the end too (the end's acknowledgement was lost with its
// channel): what it carries was delivered, and it is dropped.
//
// Pure logic, one per stream, used by the thread that reads the stream's
// channel (thread-compatible).
#ifndef RAMFERRY_ENGINE_STREAM_STREAM_CURSOR_H_
#define RAMFERRY_ENGINE_STREAM_STREAM_CURSOR_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/stream.h"

namespace ramferry::engine {

class StreamCursor {
 public:
  explicit StreamCursor(uint32_t stream) : stream_(stream) {}

  // The bytes of `payload` (the packet `frame` carried, frame.bytes long)
  // not delivered yet; empty for a packet wholly delivered before (a
  // resend, its end's included), and for the end. Changes nothing: the
  // caller delivers them, then calls Advance with how many it delivered
  // (and End at the end). INVALID_ARGUMENT for a gap, bytes past the
  // end, an end other than where the stream stands, or a packet of
  // another stream.
  absl::StatusOr<absl::Span<const uint8_t>> Fresh(
      const proto::StreamFrame& frame, absl::Span<const uint8_t> payload) const;
  void Advance(uint64_t bytes) { delivered_ += bytes; }
  void End() { ended_ = true; }

  // Fresh, then Advance by all of it (and End at the end): for a caller
  // whose delivery cannot fail.
  absl::StatusOr<absl::Span<const uint8_t>> Take(
      const proto::StreamFrame& frame, absl::Span<const uint8_t> payload);

  uint32_t stream() const { return stream_; }
  uint64_t delivered() const { return delivered_; }
  bool ended() const { return ended_; }

 private:
  const uint32_t stream_;
  uint64_t delivered_ = 0;
  bool ended_ = false;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_STREAM_STREAM_CURSOR_H_
