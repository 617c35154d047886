#include "channels/channel_factory.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "channels/rdma/rdma.h"
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
  uint64_t refused() const override { return listener_->refused(); }
  uint64_t auth_failures() const override { return listener_->auth_failures(); }

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

// How each family's channels come to exist: either over a socket this
// layer connects and accepts (open_socket), or by a connection the family
// makes itself (dial, listen; kCapOwnsConnection). The one place a kind
// maps to its code.
struct Connector {
  TransportKind kind;
  absl::StatusOr<std::unique_ptr<Transport>> (*open_socket)(
      int fd, const TransportOptions& options);
  absl::StatusOr<DialedChannel> (*dial)(const ConnectSpec& spec,
                                        const proto::Hello& hello);
  absl::StatusOr<std::unique_ptr<ChannelListener>> (*listen)(
      const ConnectSpec& spec, ChannelListener::Admit admit,
      ChannelListener::Deliver deliver, ChannelListener::Admit preview);
};

absl::StatusOr<DialedChannel> DialRdma(const ConnectSpec& spec,
                                       const proto::Hello& hello) {
  DialedChannel d;
  RAMFERRY_ASSIGN_OR_RETURN(
      std::unique_ptr<Transport> t,
      ConnectRdma(spec.host, spec.port, hello, spec.options,
                  RdmaConfigFor(spec), spec.auth_key, &d.reply));
  d.transport = std::move(t);
  return d;
}

absl::StatusOr<std::unique_ptr<ChannelListener>> ListenRdma(
    const ConnectSpec& spec, ChannelListener::Admit admit,
    ChannelListener::Deliver deliver, ChannelListener::Admit preview) {
  RAMFERRY_ASSIGN_OR_RETURN(
      std::unique_ptr<RdmaListener> l,
      RdmaListener::Listen(spec.host, spec.port, spec.options,
                           RdmaConfigFor(spec), spec.auth_key, std::move(admit),
                           std::move(deliver), std::move(preview)));
  return std::make_unique<RdmaChannelListener>(std::move(l));
}

absl::StatusOr<std::unique_ptr<Transport>> OpenTcpChannel(
    int fd, const TransportOptions& options) {
  return OpenTcp(fd, options);
}

constexpr Connector kConnectors[] = {
    {TransportKind::kTcp, &OpenTcpChannel, nullptr, nullptr},
    {TransportKind::kTcpZeroCopy, &OpenTcpZeroCopy, nullptr, nullptr},
    {TransportKind::kUringZeroCopy, &OpenUringZeroCopy, nullptr, nullptr},
    {TransportKind::kRdma, nullptr, &DialRdma, &ListenRdma},
};

const Connector* FindConnector(TransportKind kind) {
  for (const Connector& c : kConnectors) {
    if (c.kind == kind) return &c;
  }
  return nullptr;
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
    return absl::Status(
        probe.code(),
        absl::StrCat(probe.message(), "; choose the ", instead,
                     " transport (transport, --transport=", instead,
                     "), or allow the fallback "
                     "(fallback_to_tcp_zerocopy, "
                     "--uring-fallback)"));
  }
  return ResolvedTransport{
      *family->fallback,
      absl::StrCat(family->name, " unavailable (", probe.message(), "); using ",
                   instead, " instead")};
}

absl::StatusOr<std::unique_ptr<Transport>> OpenSocketChannel(
    TransportKind kind, int fd, const TransportOptions& options) {
  const Connector* c = FindConnector(kind);
  if (c == nullptr || c->open_socket == nullptr) {
    close(fd);
    return absl::UnimplementedError(
        absl::StrCat("transport ", TransportKindName(kind),
                     " does not run on a connected socket"));
  }
  if (absl::Status s = SetStallTimeouts(fd, options.stall_timeout); !s.ok()) {
    close(fd);
    return s;
  }
  return c->open_socket(fd, options);
}

absl::StatusOr<DialedChannel> DialChannel(TransportKind kind,
                                          const ConnectSpec& spec,
                                          const proto::Hello& hello) {
  const Connector* c = FindConnector(kind);
  if (c == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transport ", static_cast<int>(kind), " is not one this build has"));
  }
  if (c->dial != nullptr) return c->dial(spec, hello);
  RAMFERRY_ASSIGN_OR_RETURN(
      int fd, ConnectWithRetry(spec.host, spec.port, spec.connect_timeout));
  proto::SealKeys keys;
  absl::StatusOr<proto::HelloReply> reply =
      ExchangeHello(fd, hello, spec.auth_key, spec.deadline, &keys);
  if (!reply.ok()) {
    close(fd);
    return reply.status();
  }
  RAMFERRY_ASSIGN_OR_RETURN(std::unique_ptr<Transport> t,
                            OpenSocketChannel(kind, fd, spec.options));
  DialedChannel d;
  d.transport = std::move(t);
  d.reply = *reply;
  d.socket_fd = fd;
  if (!spec.auth_key.empty()) d.keys = keys;
  return d;
}

absl::StatusOr<std::unique_ptr<ChannelListener>> ListenForChannels(
    TransportKind kind, const ConnectSpec& spec, ChannelListener::Admit admit,
    ChannelListener::Deliver deliver, ChannelListener::Admit preview) {
  const Connector* c = FindConnector(kind);
  if (c == nullptr || c->listen == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "transport ", TransportKindName(kind),
        " channels arrive through the destination's TCP acceptor; it has no "
        "listener of its own"));
  }
  return c->listen(spec, std::move(admit), std::move(deliver),
                   std::move(preview));
}

}  // namespace ramferry::channels
