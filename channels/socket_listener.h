// The destination's listening TCP socket, for the control connection and
// every socket family's data channels. Every accepted connection must send
// a valid Hello within the handshake timeout, prove the session key when
// the destination has one (proto/auth.h), and be admitted before it gets a
// thread or a byte of memory beyond its fixed handshake buffers; the rest are
// refused with a reason and closed. Runs on its own Asio thread for the
// whole session, so late or bogus connections keep being refused without
// disturbing the transfer.
#ifndef RAMFERRY_CHANNELS_SOCKET_LISTENER_H_
#define RAMFERRY_CHANNELS_SOCKET_LISTENER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/handshake.h"
#include "proto/seal.h"

namespace ramferry::channels {

class SocketListener {
 public:
  // Decides on a decoded Hello (acceptor thread).
  using Admit = std::function<proto::HelloReply(const proto::Hello&)>;
  // Receives an admitted connection's fd (acceptor thread); fd is -1 if
  // the connection died before the acceptance reached the peer. `keys`:
  // the connection's stream keys (proto/seal.h) where it proved the key,
  // null otherwise.
  using Deliver = std::function<void(const proto::Hello&, int fd,
                                     const proto::SealKeys* keys)>;

  struct Options {
    std::string host;
    uint16_t port = 0;
    absl::Duration handshake_timeout = absl::Seconds(10);
    // The pre-shared key; empty: connections are not authenticated.
    std::string key;
    // Handshakes in progress at once, so a flood cannot exhaust memory or
    // descriptors; one more evicts the oldest handshake not yet admitted.
    int max_pending = 64;
  };

  static absl::StatusOr<std::unique_ptr<SocketListener>> Listen(
      const Options& options, Admit admit, Deliver deliver);
  ~SocketListener();

  uint16_t port() const;
  void Start();  // starts the acceptor thread
  void Stop();   // closes the listener and every pending handshake
  // Connections refused so far (bad Hello, refusal, timeout, overflow).
  uint64_t refused() const;
  // Of those, the ones that failed authentication.
  uint64_t auth_failures() const;

  class Impl;

 private:
  explicit SocketListener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_SOCKET_LISTENER_H_
