// Where a destination's channels hand the byte streams a session carries
// (docs/streams.md): every STREAM and STREAM_END packet, once its tag
// checked out, in the order its channel read it. The sink keeps one
// StreamCursor per stream across channels (a stream moves to another
// channel after a loss), and delivers only the new bytes.
#ifndef RAMFERRY_ENGINE_STREAM_STREAM_SINK_H_
#define RAMFERRY_ENGINE_STREAM_STREAM_SINK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/stream.h"

namespace ramferry::engine {

class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // A packet of a stream: `payload` is its frame.bytes bytes, authentic,
  // valid until the call returns. Called from the channel's thread; an
  // error ends the session with it.
  virtual absl::Status Take(const proto::StreamFrame& frame,
                            absl::Span<const uint8_t> payload) = 0;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_STREAM_STREAM_SINK_H_
