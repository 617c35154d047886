#include "channels/channel_factory.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "channels/rdma.h"
#include "channels/socket_dial.h"
#include "channels/socket_io.h"
#include "channels/tcp.h"
#include "channels/tcp_zerocopy.h"
#include "channels/transport_family.h"
#include "channels/uring_zerocopy.h"

namespace ramferry::channels {
namespace {

class RdmaChannelListener final : public ChannelListener {
 public:
  explicit RdmaChannelListener(std::unique_ptr<RdmaListener> l)
      : listener_(std::move(l)) {}

 private:
  std::unique_ptr<RdmaListener> listener_;
};

RdmaConfig RdmaConfigFor(const ConnectSpec& spec) {
  RdmaConfig config;
  config.capabilities = spec.session_capabilities;
  config.chunk_bytes = spec.chunk_bytes;
  config.max_inline = spec.max_inline;
  config.connect_timeout = spec.connect_timeout;
  return config;
}

}  // namespace

absl::StatusOr<ResolvedTransport> ResolveTransport(TransportKind kind,
                                                   bool allow_fallback) {
  const TransportFamily* family = FindTransportFamily(kind);
  if (family == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transport ", static_cast<int>(kind), " is not one this build has"));
  }
  if (family->probe == nullptr) return ResolvedTransport{kind, ""};
  const absl::Status probe = family->probe();
  if (probe.ok()) return ResolvedTransport{kind, ""};
  if (!family->fallback) {
    return absl::Status(probe.code(),
                        absl::StrCat(family->name, ": ", probe.message()));
  }
  const absl::string_view instead = TransportKindName(*family->fallback);
  if (!allow_fallback) {
    return absl::Status(probe.code(),
                        absl::StrCat(probe.message(), "; choose --transport=",
                                     instead, ", or allow the fallback"));
  }
  return ResolvedTransport{
      *family->fallback,
      absl::StrCat(family->name, " unavailable (", probe.message(), "); using ",
                   instead, " instead")};
}

absl::StatusOr<std::unique_ptr<Transport>> OpenSocketChannel(
    TransportKind kind, int fd, const TransportOptions& options) {
  if (absl::Status s = SetStallTimeouts(fd, options.stall_timeout); !s.ok()) {
    close(fd);
    return s;
  }
  switch (kind) {
    case TransportKind::kTcp:
      return OpenTcp(fd, options);
    case TransportKind::kTcpZeroCopy:
      return OpenTcpZeroCopy(fd, options);
    case TransportKind::kUringZeroCopy:
      return OpenUringZeroCopy(fd, options);
    default:
      close(fd);
      return absl::UnimplementedError(
          absl::StrCat("transport ", TransportKindName(kind),
                       " does not run on a connected socket"));
  }
}

absl::StatusOr<DialedChannel> DialChannel(TransportKind kind,
                                          const ConnectSpec& spec,
                                          const proto::Hello& hello) {
  DialedChannel d;
  if ((StaticCapabilities(kind) & kCapOwnsConnection) != 0) {
    absl::StatusOr<std::unique_ptr<Transport>> t =
        ConnectRdma(spec.host, spec.port, hello, spec.options,
                    RdmaConfigFor(spec), &d.reply);
    if (!t.ok()) return t.status();
    d.transport = std::move(*t);
    return d;
  }
  absl::StatusOr<int> fd =
      ConnectWithRetry(spec.host, spec.port, spec.connect_timeout);
  if (!fd.ok()) return fd.status();
  absl::StatusOr<proto::HelloReply> reply =
      ExchangeHello(*fd, hello, spec.auth_key, spec.deadline);
  if (!reply.ok()) {
    close(*fd);
    return reply.status();
  }
  absl::StatusOr<std::unique_ptr<Transport>> t =
      OpenSocketChannel(kind, *fd, spec.options);
  if (!t.ok()) return t.status();
  d.transport = std::move(*t);
  d.reply = *reply;
  d.socket_fd = *fd;
  return d;
}

absl::StatusOr<std::unique_ptr<ChannelListener>> ListenForChannels(
    TransportKind kind, const ConnectSpec& spec, ChannelListener::Admit admit,
    ChannelListener::Deliver deliver) {
  if (kind != TransportKind::kRdma) {
    return absl::UnimplementedError(absl::StrCat(
        "transport ", TransportKindName(kind),
        " channels arrive through the destination's TCP acceptor; it has no "
        "listener of its own"));
  }
  absl::StatusOr<std::unique_ptr<RdmaListener>> l = RdmaListener::Listen(
      spec.host, spec.port, spec.options, RdmaConfigFor(spec), std::move(admit),
      std::move(deliver));
  if (!l.ok()) return l.status();
  return std::make_unique<RdmaChannelListener>(std::move(*l));
}

}  // namespace ramferry::channels
