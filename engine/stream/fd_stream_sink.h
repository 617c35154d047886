// The destination's StreamSink for peers reached by sockets: stream s's
// new bytes go, in order and once each, to the connected socket opened
// for it (a connection to the destination QEMU's incoming socket). At
// STREAM_END, once every byte went, the write side is shut and the peer
// reads the end of its stream.
//
// Never blocks a channel: Take queues the bytes and a writer thread per
// stream sends them. A channel carries several streams, and QEMU's
// destination reads one of its connections only once another delivered
// what it waits for (a multifd channel waits for the main one's sync):
// a channel blocked on one stream's slow peer would hold the bytes
// another peer needs behind it, and both would wait forever. The queue
// stays bounded all the same: the source keeps at most its backlog of
// each stream unacknowledged, and acknowledgements (OnDelivered) come as
// bytes reach the peer, so a slow peer holds its own stream back, and
// only it. A source that ignores them is refused past `max_queued`.
//
// Thread-safe: channels call Take concurrently, and a stream may move to
// another channel after a loss. A peer that reads nothing for the
// stall timeout (the caller's SO_SNDTIMEO on its socket), closes, or
// fails, fails its stream through OnError. Shutdown (of each socket, by
// the caller) stops the writers; the destructor joins them.
#ifndef RAMFERRY_ENGINE_STREAM_FD_STREAM_SINK_H_
#define RAMFERRY_ENGINE_STREAM_FD_STREAM_SINK_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/stream/stream_cursor.h"
#include "engine/stream/stream_sink.h"
#include "proto/stream.h"

namespace ramferry::engine {

class FdStreamSink : public StreamSink {
 public:
  // Told, on the stream's writer thread, each time the bytes its peer
  // took passed `ack_every` more since it was last told, and at its end:
  // the source then drops them and sends more (STREAM_ACK).
  using OnDelivered =
      std::function<void(uint32_t stream, uint64_t delivered, bool ended)>;
  // A stream's peer failed (closed, stalled, refused): the session ends.
  using OnError = std::function<void(const absl::Status&)>;
  struct Options {
    OnDelivered on_delivered;  // null: never told
    OnError on_error;          // null: nobody told
    uint64_t ack_every = 1 << 20;
    uint64_t max_queued = 64 << 20;  // per stream
  };
  FdStreamSink();
  explicit FdStreamSink(Options options);
  ~FdStreamSink() override;
  FdStreamSink(const FdStreamSink&) = delete;
  FdStreamSink& operator=(const FdStreamSink&) = delete;

  // Stream `stream` goes to connected socket `fd` from now on (the caller
  // owns it and keeps it open while the sink lives), and its writer
  // starts. INVALID_ARGUMENT for a stream at or past proto::kMaxStreams,
  // or one opened before.
  absl::Status Open(uint32_t stream, int fd);

  // StreamSink: queues the bytes not taken yet. INVALID_ARGUMENT for a
  // stream not opened, what its StreamCursor refuses, and past
  // max_queued; the stream's failure once its writer failed.
  absl::Status Take(const proto::StreamFrame& frame,
                    absl::Span<const uint8_t> payload) override;

  // Stops every writer (its queued bytes are dropped); a writer blocked
  // in a send returns once the caller shuts that socket down. Any thread,
  // a writer's own too (its OnError may end the session).
  void Stop();
  // Stop, then waits for every writer to return: before the caller closes
  // their sockets. Not from a writer.
  void Join();

  // Bytes `stream`'s peer took so far; whether its end went (every byte,
  // then the shut write side). Never wait.
  uint64_t delivered(uint32_t stream) const;
  bool ended(uint32_t stream) const;

 private:
  // std::mutex, not absl's: TSan sees it whole (Debian's absl is not
  // built for it).
  struct Stream {
    std::mutex mu;
    std::condition_variable cv;  // wakes the writer on any change below
    // Guarded by mu.
    int fd = -1;
    // What Take accepted: the queue's bytes and what the peer took.
    std::optional<StreamCursor> cursor;
    std::deque<std::vector<uint8_t>> queue;
    uint64_t queued = 0;
    bool end = false;  // STREAM_END accepted
    absl::Status failed;
    // Not guarded.
    std::thread writer;
    std::atomic<uint64_t> delivered{0};
    std::atomic<bool> ended{false};
  };
  // The writer of stream `id`: sends what is queued, then the end.
  void Write(uint32_t id);
  // Its steps: waits for the next chunk (into *chunk), the end or a stop;
  // sends a chunk (false once the stream failed or stopped); ends the
  // stream once every byte went.
  enum class Step { kChunk, kEnd, kStop };
  Step NextStep(Stream& s, std::vector<uint8_t>* chunk);
  bool SendChunk(uint32_t id, Stream& s, int fd,
                 const std::vector<uint8_t>& chunk);
  void EndStream(uint32_t id, Stream& s, int fd);
  void Fail(Stream& s, const absl::Status& status);

  const Options options_;
  std::atomic<bool> stopped_{false};
  const std::unique_ptr<Stream[]> streams_;  // proto::kMaxStreams of them
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_STREAM_FD_STREAM_SINK_H_
