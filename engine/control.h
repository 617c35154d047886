// The control plane: ControlChannel, which carries framed control
// messages, and the session id. Connecting and the Hello exchange are the
// socket families' own (channels/socket_dial.h).
#ifndef RAMFERRY_ENGINE_CONTROL_H_
#define RAMFERRY_ENGINE_CONTROL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "channels/socket_dial.h"
#include "proto/control.h"
#include "proto/handshake.h"
#include "proto/seal.h"

namespace ramferry::engine {

// A fresh random session id (getrandom).
proto::SessionId NewSessionId();

class ControlChannel {
 public:
  struct Message {
    proto::ControlType type;
    std::vector<uint8_t> payload;
  };

  // Takes ownership of the connected `fd`. A send that cannot finish in
  // `send_timeout` fails (the peer stopped reading).
  ControlChannel(int fd, absl::Duration send_timeout);
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  // Sends one whole frame; safe from any thread.
  absl::Status Send(absl::Span<const uint8_t> frame);
  // Best effort for a last word (an ERROR while tearing down): waits for
  // another thread's send and then sends, all within `timeout`.
  void TrySend(absl::Span<const uint8_t> frame, absl::Duration timeout);
  // Reads one message (one reader thread at a time). Waits until
  // `deadline`; a frame header whose length exceeds its type's bound is an
  // error before any payload is read.
  absl::StatusOr<Message> Receive(absl::Time deadline = absl::InfiniteFuture());
  // Waits up to `timeout` for the next message to start arriving (or the
  // connection to close); false if nothing came.
  bool WaitReadable(absl::Duration timeout);
  // Whether a message (or the close) has started arriving: a Receive now
  // would not wait for the peer.
  bool Readable() const;
  // Wakes a blocked Receive/Send; the channel is unusable afterwards.
  void Shutdown();
  // From here on every frame goes out sealed by `send` and must open
  // under `receive` (proto/seal.h: a 16-byte tag after the payload, each
  // direction numbering its frames from 0). Called once, right after the
  // Hello exchange and before any frame, on the thread that owns the
  // channel then.
  void Seal(std::unique_ptr<proto::Sealer> send,
            std::unique_ptr<proto::Sealer> receive);

 private:
  // The bytes that go on the wire for `frame`: itself, or sealed into
  // sealed_out_. Needs the send side (AcquireSend).
  absl::Span<const uint8_t> WireFrame(absl::Span<const uint8_t> frame);
  absl::Status OpenFrame(Message* m, absl::Span<const uint8_t> head,
                         absl::Time deadline);

  // One writer at a time, and a TrySend that gives up after a bounded
  // wait: a flag under a plain mutex. (std::timed_mutex would do, but its
  // timed lock goes through pthread_mutex_clocklock, which TSan does not
  // see, so every unlock after it is reported as a bogus error.)
  bool AcquireSend(absl::Duration wait);  // false: still busy after `wait`
  void ReleaseSend();

  const int fd_;
  const absl::Duration send_timeout_;
  std::mutex send_mu_;
  std::condition_variable send_free_;
  bool sending_ = false;  // guarded by send_mu_
  std::atomic<bool> shut_down_{false};
  // Sealing: the send side's, under AcquireSend; the receive side's, the
  // reader's.
  std::unique_ptr<proto::Sealer> send_sealer_;
  uint64_t sent_frames_ = 0;
  std::vector<uint8_t> sealed_out_;
  std::unique_ptr<proto::Sealer> receive_sealer_;
  uint64_t received_frames_ = 0;
};

// Receives a message and insists on its type (for request/reply steps).
absl::StatusOr<std::vector<uint8_t>> ReceiveExpected(ControlChannel& channel,
                                                     proto::ControlType type,
                                                     absl::Time deadline);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_CONTROL_H_
