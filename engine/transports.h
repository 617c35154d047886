// Opens the send side of a transport on a connected data socket.
#ifndef RAMFERRY_ENGINE_TRANSPORTS_H_
#define RAMFERRY_ENGINE_TRANSPORTS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "channels/transport.h"

namespace ramferry::engine {

// Takes ownership of `fd` (closed on failure too). With `fallback`, a
// uring-zc that this kernel cannot run becomes tcp-zerocopy, and
// *warning says so.
absl::StatusOr<std::unique_ptr<channels::Transport>> OpenSocketTransport(
    TransportKind kind, int fd, const channels::TransportOptions& options,
    bool fallback, std::string* warning);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_TRANSPORTS_H_
