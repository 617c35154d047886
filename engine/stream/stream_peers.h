// The destination's end of a session's carried streams (docs/streams.md):
// for each STREAM_OPEN, a connection to a peer of its own (the destination
// QEMU's incoming socket), made by the caller's hook; the sink the
// channels deliver each stream's bytes to (FdStreamSink); and a thread
// per stream that reads what the peer sends back and sends it to the
// source as STREAM_BACK messages, then STREAM_BACK_END at its EOF; and
// STREAM_ACK every MiB delivered and at each stream's end.
//
// Streams open in order, one at a time, each connected before it is
// answered: QEMU takes its first connection as the main channel.
//
// Thread-safe: the control thread opens; the channels' threads deliver;
// any thread shuts down. The destructor joins every thread and closes
// every connection.
#ifndef RAMFERRY_ENGINE_STREAM_STREAM_PEERS_H_
#define RAMFERRY_ENGINE_STREAM_STREAM_PEERS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/stream/fd_stream_sink.h"

namespace ramferry::engine {

class StreamPeers {
 public:
  // Connects stream `stream`'s peer: a connected socket this object then
  // owns, or the reason there is none.
  using Connect = std::function<absl::StatusOr<int>(uint32_t stream)>;
  // Sends one control frame to the source.
  using SendControl = std::function<absl::Status(absl::Span<const uint8_t>)>;
  using OnError = std::function<void(const absl::Status&)>;

  // A peer that reads none of its stream for `stall_timeout` while bytes
  // wait for it fails the stream (SO_SNDTIMEO on its connection): a
  // destination QEMU that neither reads nor closes ends the session
  // rather than holding it forever.
  StreamPeers(Connect connect, SendControl send, OnError on_error,
              absl::Duration stall_timeout);
  ~StreamPeers();
  StreamPeers(const StreamPeers&) = delete;
  StreamPeers& operator=(const StreamPeers&) = delete;

  StreamSink* sink() { return &sink_; }

  // STREAM_OPEN's payload: connects the next stream's peer, starts its
  // reader, answers STREAM_OPENED. INVALID_ARGUMENT for a stream out of
  // turn; the hook's error, annotated, where its peer cannot be reached.
  absl::Status Open(absl::Span<const uint8_t> payload);

  // At FINISH: every stream's end was delivered. FAILED_PRECONDITION
  // naming the first that was not.
  absl::Status CheckEnded() const;

  // Shuts every connection down: the readers stop, and each peer sees
  // its stream cut. Any thread; idempotent.
  void Shutdown();

  // Each stream's bytes delivered to its peer and read back from it, and
  // whether each direction ended; never waits for a send in progress.
  struct Counts {
    uint32_t stream = 0;
    uint64_t delivered = 0;
    uint64_t back = 0;
    bool ended = false;
    bool back_ended = false;
  };
  std::vector<Counts> counts() const;

 private:
  struct Peer {
    uint32_t stream = 0;
    int fd = -1;
    std::thread reader;
    std::atomic<uint64_t> back{0};
    std::atomic<bool> back_ended{false};
  };
  void ReadBack(Peer* peer);

  const Connect connect_;
  const SendControl send_;
  const OnError on_error_;
  const absl::Duration stall_timeout_;
  FdStreamSink sink_;
  mutable std::mutex mu_;                     // std::mutex: TSan sees it whole
  std::vector<std::unique_ptr<Peer>> peers_;  // guarded by mu_
  bool shut_down_ = false;                    // guarded by mu_
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_STREAM_STREAM_PEERS_H_
