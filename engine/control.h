// The control plane's connection helpers: connect with retry, the Hello
// exchange, and ControlChannel, which carries framed control messages.
#ifndef RAMFERRY_ENGINE_CONTROL_H_
#define RAMFERRY_ENGINE_CONTROL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/control.h"
#include "proto/handshake.h"

namespace ramferry::engine {

// Connects a TCP socket to host:port, retrying refused connections until
// `timeout` (the peer may still be starting). Returns the connected fd
// with TCP_NODELAY set.
absl::StatusOr<int> ConnectWithRetry(const std::string& host, uint16_t port,
                                     absl::Duration timeout);

// Writes all of `data` / reads exactly `buf` before `deadline`.
absl::Status WriteWithDeadline(int fd, absl::Span<const uint8_t> data,
                               absl::Time deadline);
absl::Status ReadWithDeadline(int fd, absl::Span<uint8_t> buf,
                              absl::Time deadline);

// Sends `hello` on a fresh connection and returns the peer's reply; a
// refusal comes back as the error the peer gave. With a `key`, the Hello
// asks for authentication and both ends prove the key (proto/auth.h)
// before the reply; a destination that cannot is an error.
absl::StatusOr<proto::HelloReply> ExchangeHello(int fd, proto::Hello hello,
                                                absl::string_view key,
                                                absl::Time deadline);

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
  // Wakes a blocked Receive/Send; the channel is unusable afterwards.
  void Shutdown();

 private:
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
};

// Receives a message and insists on its type (for request/reply steps).
absl::StatusOr<std::vector<uint8_t>> ReceiveExpected(ControlChannel& channel,
                                                     proto::ControlType type,
                                                     absl::Time deadline);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_CONTROL_H_
