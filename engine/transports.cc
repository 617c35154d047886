#include "engine/transports.h"

#include <unistd.h>

#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "channels/socket_io.h"
#include "channels/tcp.h"
#include "channels/tcp_zerocopy.h"
#include "channels/uring_zerocopy.h"

namespace ramferry::engine {
namespace {

std::mutex decorator_mu;
TransportDecorator& Decorator() {  // guarded by decorator_mu
  static TransportDecorator* d = new TransportDecorator();
  return *d;
}

}  // namespace

void SetTransportDecoratorForTesting(TransportDecorator decorator) {
  std::lock_guard<std::mutex> lock(decorator_mu);
  Decorator() = std::move(decorator);
}

std::unique_ptr<channels::Transport> DecorateTransport(
    std::unique_ptr<channels::Transport> transport, const TransportSite& site) {
  TransportDecorator d;
  {
    std::lock_guard<std::mutex> lock(decorator_mu);
    d = Decorator();
  }
  if (!d || transport == nullptr) return transport;
  return d(std::move(transport), site);
}

absl::StatusOr<std::unique_ptr<channels::Transport>> OpenSocketTransport(
    TransportKind kind, int fd, const channels::TransportOptions& options,
    bool fallback, std::string* warning) {
  if (absl::Status s = channels::SetStallTimeouts(fd, options.stall_timeout);
      !s.ok()) {
    close(fd);
    return s;
  }
  switch (kind) {
    case TransportKind::kTcp:
      return channels::OpenTcp(fd, options);
    case TransportKind::kTcpZeroCopy:
      return channels::OpenTcpZeroCopy(fd, options);
    case TransportKind::kUringZeroCopy: {
      absl::Status probe = channels::ProbeUringZeroCopy();
      if (probe.ok()) return channels::OpenUringZeroCopy(fd, options);
      if (!fallback) {
        close(fd);
        return absl::Status(
            probe.code(),
            absl::StrCat(probe.message(),
                         "; choose --transport=tcp-zerocopy, or allow the "
                         "fallback"));
      }
      *warning = absl::StrCat("uring-zc unavailable (", probe.message(),
                              "); using tcp-zerocopy instead");
      return channels::OpenTcpZeroCopy(fd, options);
    }
    default:
      close(fd);
      return absl::UnimplementedError(absl::StrCat("transport ",
                                                   TransportKindName(kind),
                                                   " is not built into this "
                                                   "version of ramferry"));
  }
}

}  // namespace ramferry::engine
