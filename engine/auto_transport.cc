// ChooseTransport: which interface would carry traffic to the peer decides
// whether zero-copy can avoid a copy at all.
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "channels/uring_zerocopy.h"
#include "ramferry/transport.h"

namespace ramferry {
namespace {

bool SameAddress(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  }
  return false;
}

// The route to `host`: the peer's address and the local address the
// kernel would send from.
struct Route {
  sockaddr_storage peer{};
  sockaddr_storage local{};
};

absl::StatusOr<Route> FindRoute(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int r = getaddrinfo(host.c_str(), "9", &hints, &res); r != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot resolve %s: %s", host, gai_strerror(r)));
  }
  // A UDP connect sends nothing; it only asks the kernel for the route,
  // whose source address tells the interface.
  Route route;
  socklen_t len = sizeof route.local;
  int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const bool routed =
      fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&route.local), &len) == 0;
  if (fd >= 0) close(fd);
  std::memcpy(&route.peer, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (!routed) {
    return absl::UnavailableError(absl::StrFormat("no route to %s", host));
  }
  return route;
}

// What this host's interfaces say of a route: the one it leaves by, and
// whether the peer is one of this host's own addresses.
struct RouteInterface {
  std::string name;  // empty: not found
  bool loopback = false;
  bool peer_is_local = false;
};

RouteInterface FindInterface(const Route& route) {
  RouteInterface out;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (SameAddress(i->ifa_addr,
                    reinterpret_cast<const sockaddr*>(&route.peer))) {
      out.peer_is_local = true;
    }
    if (SameAddress(i->ifa_addr,
                    reinterpret_cast<const sockaddr*>(&route.local))) {
      out.name = i->ifa_name;
      out.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    }
  }
  freeifaddrs(ifs);
  return out;
}

}  // namespace

absl::StatusOr<TransportChoice> ChooseTransport(const std::string& host) {
  absl::StatusOr<Route> route = FindRoute(host);
  if (!route.ok()) return route.status();
  const RouteInterface found = FindInterface(*route);
  const std::string& iface = found.name;
  const bool loopback_iface = found.loopback;
  const bool peer_is_local = found.peer_is_local;
  TransportChoice c;
  // veth, bridges and tunnels deliver inside this machine as well: only an
  // interface backed by a device is a NIC where zero-copy saves a copy.
  const bool physical =
      !iface.empty() &&
      access(absl::StrFormat("/sys/class/net/%s/device", iface).c_str(),
             F_OK) == 0;
  if (!loopback_iface && !peer_is_local && !physical) {
    c.kind = TransportKind::kTcp;
    c.reason = absl::StrFormat(
        "tcp: %s is reached through %s, a virtual interface: delivery stays "
        "inside this machine and copies zero-copy payloads anyway",
        host, iface.empty() ? "an unknown interface" : iface);
    return c;
  }
  if (loopback_iface || peer_is_local) {
    c.kind = TransportKind::kTcp;
    c.reason = absl::StrFormat(
        "tcp: %s is on this host (via %s); loopback delivery copies every "
        "zero-copy payload, so zero-copy would only add completion work",
        host, iface.empty() ? "loopback" : iface);
    return c;
  }
  if (channels::ProbeUringZeroCopy().ok()) {
    c.kind = TransportKind::kUringZeroCopy;
    c.reason = absl::StrFormat(
        "uring-zc: %s is reached through %s, a network device: zero-copy "
        "sends pages without copying them, and io_uring batches the sends",
        host, iface.empty() ? "a NIC" : iface);
  } else {
    c.kind = TransportKind::kTcpZeroCopy;
    c.reason = absl::StrFormat(
        "tcp-zerocopy: %s is reached through %s, a network device (io_uring "
        "zero-copy is unavailable on this kernel)",
        host, iface.empty() ? "a NIC" : iface);
  }
  return c;
}

}  // namespace ramferry
