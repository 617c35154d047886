#include "engine/endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "absl/strings/str_cat.h"

namespace ramferry::engine {

std::string EndpointName(absl::string_view host, uint16_t port) {
  if (host.find(':') != absl::string_view::npos) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

Endpoint ChannelEndpoint(const SessionOptions& options, uint32_t channel) {
  if (options.channel_endpoints.empty()) {
    return {options.host, options.port};
  }
  Endpoint e =
      options.channel_endpoints[channel % options.channel_endpoints.size()];
  if (e.port == 0) e.port = options.port;
  return e;
}

std::string LocalEndpointName(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    return EndpointName(text, ntohs(in->sin_port));
  }
  if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    return EndpointName(text, ntohs(in6->sin6_port));
  }
  return "";
}

}  // namespace ramferry::engine
