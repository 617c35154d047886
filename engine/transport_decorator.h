// The test-only hook that lets tests wrap the transports a session opens.
#ifndef RAMFERRY_ENGINE_TRANSPORT_DECORATOR_H_
#define RAMFERRY_ENGINE_TRANSPORT_DECORATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "channels/transport.h"

namespace ramferry::engine {

// Tests install a decorator to wrap every data-channel transport a Sender
// or Receiver opens (fault injection: tests/support/faulty_transport.h).
// Production code never installs one; with none installed, Decorate is a
// pass-through.

// Where a session opened a data channel.
struct TransportSite {
  bool source = false;   // a Sender's channel (else a Receiver's)
  uint32_t channel = 0;  // channel index
  // The connected socket under a socket transport, owned by the transport
  // (the decorator may act on the connection, never close it); -1 for
  // rdma.
  int fd = -1;
};
using TransportDecorator = std::function<std::unique_ptr<channels::Transport>(
    std::unique_ptr<channels::Transport>, const TransportSite&)>;

// Process-wide: applies to sessions that open channels from now on; an
// empty function removes it.
void SetTransportDecoratorForTesting(TransportDecorator decorator);

// What the engine calls on each data transport it opens.
std::unique_ptr<channels::Transport> DecorateTransport(
    std::unique_ptr<channels::Transport> transport, const TransportSite& site);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_TRANSPORT_DECORATOR_H_
