// The source's end of one carried stream (docs/streams.md): the
// connection of its peer (one of the source QEMU's migration
// connections), a thread that reads it into a bounded backlog and hands
// each read to the stream's channel as one STREAM packet, and what comes
// back from the destination's peer, written to the connection.
//
// Backpressure: the reader takes no more than the backlog has room for,
// and room comes back only once the destination's peer took the bytes
// (STREAM_ACK). A slow link or a slow peer fills the backlog, the reader
// stops reading, and the peer's own send blocks: QEMU measures the real
// bandwidth. Each stream has its own window, so one peer that waits for
// another (QEMU's multifd channels wait for its main one) never holds
// the other's bytes back on a shared channel.
//
// Threads: the reader (its own); the channel's thread (Sent, EndSent);
// the control thread (Back, BackEnd); any thread (WaitDone, Shutdown,
// counts). The backlog's bytes between what was sent and what was read
// are the channel's to read; the reader writes only past them.
#ifndef RAMFERRY_ENGINE_STREAM_CARRIED_STREAM_H_
#define RAMFERRY_ENGINE_STREAM_CARRIED_STREAM_H_

#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/stream/stream_backlog.h"
#include "proto/stream_control.h"

namespace ramferry::engine {

class CarriedStream {
 public:
  // What the reader hands the stream's channel: `bytes` of the stream at
  // `offset` (valid until Sent passes them), or its end (`end`, at
  // `offset` = its length, no bytes).
  struct Chunk {
    uint32_t stream = 0;
    uint64_t offset = 0;
    absl::Span<const uint8_t> bytes;
    bool end = false;
  };
  // Queues a chunk on the stream's channel; false once the session is
  // over (the reader then stops).
  using Enqueue = std::function<bool(const Chunk&)>;
  // A failure of the stream's connection: it ends the session.
  using OnError = std::function<void(const absl::Status&)>;

  // Owns `fd`, a connected socket, and closes it when destroyed.
  // `capacity`: the backlog's bytes. Bytes stay in it until the
  // destination acknowledges them (Acked): the backlog is the stream's
  // window, so the destination never holds more of it than that, and
  // after a lost channel what it lacks can go again (TakeResend).
  CarriedStream(uint32_t stream, int fd, uint64_t capacity);
  ~CarriedStream();
  CarriedStream(const CarriedStream&) = delete;
  CarriedStream& operator=(const CarriedStream&) = delete;

  // Starts the reader.
  void Start(Enqueue enqueue, OnError on_error);
  // Ends the stream where it stands: shuts the connection down (which
  // wakes the reader, and tells the peer its migration is over) and ends
  // every wait. Any thread, the reader's own included; idempotent. The
  // destructor joins the reader.
  void Shutdown();
  // Waits for the reader to return (after Shutdown, or the stream's end).
  // The backlog stays: a channel may still send from it until it stopped.
  void JoinReader();

  // ---- the channel's thread ----
  // Every byte below `end` went out (counted; its room comes back with
  // the acknowledgement).
  void Sent(uint64_t end);
  // STREAM_END went out.
  void EndSent();

  // ---- surviving a lost channel ----
  // What goes again on the stream's new channel: every byte kept (from
  // the last acknowledged offset to what was read), as at most two spans
  // valid until they are Sent again, and the end where the peer's EOF
  // was read. From here on the reader's chunks that this covers are not
  // queued again (Covers).
  struct Resend {
    uint64_t from = 0;
    std::array<absl::Span<const uint8_t>, 2> spans;
    bool end = false;
    uint64_t length = 0;  // the stream's length so far: the end's offset
  };
  Resend TakeResend();
  // Whether `chunk` went already in a resend.
  bool Covers(const Chunk& chunk) const;

  // ---- the control thread ----
  // STREAM_ACK: the destination's peer holds every byte below `offset`
  // (and the end, with `end`). INVALID_ARGUMENT past what was read.
  absl::Status Acked(uint64_t offset, bool end);
  // The destination's peer sent these bytes back: written to the
  // connection. INVALID_ARGUMENT for bytes out of order or after the
  // back end; UNAVAILABLE where the peer closed its end.
  absl::Status Back(const proto::StreamBack& back);
  // The destination's peer closed its sending side: so does this end.
  absl::Status BackEnd(const proto::StreamBackEnd& end);

  // Waits until both directions ended (STREAM_END sent and the back end
  // came), `deadline` passed or Shutdown (false).
  bool WaitDone(absl::Time deadline);

  // Both ways ended (WaitDone would not wait).
  bool done() const;
  uint32_t stream() const { return stream_; }
  struct Counts {
    uint64_t read = 0;   // from the peer
    uint64_t sent = 0;   // of those, out on the channel
    uint64_t back = 0;   // written back to the peer
    uint64_t acked = 0;  // by the destination
    bool end_sent = false;
    bool end_acked = false;
    bool back_ended = false;
  };
  Counts counts() const;

 private:
  void Run();
  // The next read's room in the backlog, waiting for some; empty once
  // stopped.
  absl::Span<uint8_t> WaitRoom();

  // Both ways ended: the end acknowledged, the way back ended. Needs mu_.
  bool DoneLocked() const;

  const uint32_t stream_;
  const int fd_;
  Enqueue enqueue_;
  OnError on_error_;
  std::thread reader_;

  // std::mutex, not absl's: TSan sees it whole (Debian's absl is not
  // built for it). cv_ wakes a wait on any change below.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  StreamBacklog backlog_;
  Counts counts_;
  bool stopped_ = false;
  bool eof_read_ = false;
  // The last resend covered the bytes below this, and the end where set.
  uint64_t resent_end_ = 0;
  bool end_resent_ = false;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_STREAM_CARRIED_STREAM_H_
