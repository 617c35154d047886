// Where a data channel goes (SessionOptions::channel_endpoints) and how
// the stats name it: "host:port", an IPv6 host in brackets.
#ifndef RAMFERRY_ENGINE_ENDPOINT_H_
#define RAMFERRY_ENGINE_ENDPOINT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "ramferry/options.h"

namespace ramferry::engine {

// "10.0.0.2:7070", "[fd00::2]:7070".
std::string EndpointName(absl::string_view host, uint16_t port);

// Where the source's data channel `channel` dials: channel_endpoints[i %
// size()] with its port 0 made the session's, or host:port without any.
Endpoint ChannelEndpoint(const SessionOptions& options, uint32_t channel);

// The local address of connected socket `fd` as EndpointName() writes
// it: for a destination, the address a channel arrived on. "" when the
// socket has none (not an IP socket).
std::string LocalEndpointName(int fd);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_ENDPOINT_H_
