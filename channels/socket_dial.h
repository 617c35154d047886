// Dialling a stream socket and the Hello exchange on it, the way every
// socket family connects a channel (and the session its control
// connection): connect with retry, then the Hello, with the key proven
// both ways where there is one.
#ifndef RAMFERRY_CHANNELS_SOCKET_DIAL_H_
#define RAMFERRY_CHANNELS_SOCKET_DIAL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/handshake.h"
#include "proto/seal.h"

namespace ramferry::channels {

// Connects a TCP socket to host:port, retrying refused connections until
// `timeout` (the peer may still be starting). Returns the connected fd
// with TCP_NODELAY set.
absl::StatusOr<int> ConnectWithRetry(const std::string& host, uint16_t port,
                                     absl::Duration timeout);

// Waits for poll `events` on `fd` until `deadline`; DEADLINE_EXCEEDED
// names `what`.
absl::Status PollUntil(int fd, short events, absl::Time deadline,
                       const char* what);

// Writes all of `data` / reads exactly `buf` before `deadline`.
absl::Status WriteWithDeadline(int fd, absl::Span<const uint8_t> data,
                               absl::Time deadline);
absl::Status ReadWithDeadline(int fd, absl::Span<uint8_t> buf,
                              absl::Time deadline);

// Sends `hello` on a fresh connection and returns the peer's reply; a
// refusal comes back as the error the peer gave. With a `key`, the Hello
// asks for authentication and both ends prove the key (proto/auth.h)
// before the reply; a destination that cannot is an error. With a key and
// `keys`, *keys gets the connection's stream keys (proto/seal.h).
absl::StatusOr<proto::HelloReply> ExchangeHello(
    int fd, proto::Hello hello, absl::string_view key, absl::Time deadline,
    proto::SealKeys* keys = nullptr);

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_SOCKET_DIAL_H_
