// The destination's StreamSink for a peer reached by sockets: stream s's
// new bytes are sent, in order and once each, on the connected socket
// opened for it (a connection to the destination QEMU's incoming
// socket). A write blocks while the peer reads slowly, so the channel
// that carries the stream stops reading and the source is held back: the
// backpressure QEMU measures its bandwidth by. At STREAM_END the write
// side is shut, and the peer reads the end of its stream.
//
// Thread-safe: channels call Take concurrently, and a stream may move to
// another channel after a loss; each stream has its own lock, held
// through a blocked send. A caller that must stop a stream whose peer
// does not read shuts its socket down (shutdown(2)), which fails the
// send.
#ifndef RAMFERRY_ENGINE_STREAM_FD_STREAM_SINK_H_
#define RAMFERRY_ENGINE_STREAM_FD_STREAM_SINK_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "engine/stream/stream_cursor.h"
#include "engine/stream/stream_sink.h"
#include "proto/stream.h"

namespace ramferry::engine {

class FdStreamSink : public StreamSink {
 public:
  // Told, on the delivering channel's thread, each time a stream's
  // delivered bytes passed `ack_every` more since it was last told, and at
  // its end: the source then drops them (STREAM_ACK), and after a lost
  // channel resends only what follows. Null: never.
  using OnDelivered =
      std::function<void(uint32_t stream, uint64_t delivered, bool ended)>;
  explicit FdStreamSink(OnDelivered on_delivered = nullptr,
                        uint64_t ack_every = 1 << 20);

  // Stream `stream` goes to connected socket `fd` from now on (the caller
  // owns it and keeps it open while the sink lives). INVALID_ARGUMENT for a
  // stream at or past proto::kMaxStreams, or one opened before.
  absl::Status Open(uint32_t stream, int fd);

  // StreamSink. INVALID_ARGUMENT for a stream not opened, and for what
  // its StreamCursor refuses; UNAVAILABLE where the peer closed its end.
  absl::Status Take(const proto::StreamFrame& frame,
                    absl::Span<const uint8_t> payload) override;

  // Bytes sent to `stream`'s peer so far; whether its end came. Never
  // wait for a send in progress.
  uint64_t delivered(uint32_t stream) const;
  bool ended(uint32_t stream) const;

 private:
  struct Stream {
    mutable absl::Mutex mu;
    int fd ABSL_GUARDED_BY(mu) = -1;
    std::optional<StreamCursor> cursor ABSL_GUARDED_BY(mu);
    uint64_t told ABSL_GUARDED_BY(mu) = 0;  // delivered, as last told
    // The cursor's, for readers that must not wait behind a send.
    std::atomic<uint64_t> delivered{0};
    std::atomic<bool> ended{false};
  };
  const OnDelivered on_delivered_;
  const uint64_t ack_every_;
  const std::unique_ptr<Stream[]> streams_;  // proto::kMaxStreams of them
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_STREAM_FD_STREAM_SINK_H_
