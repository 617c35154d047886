#include "channels/tcp.h"

#include <memory>

#include "channels/socket_transport.h"
#include "channels/transport_family.h"

namespace ramferry::channels {
namespace {

class TcpTransport final : public SocketTransport {
 public:
  TcpTransport(int fd, const TransportOptions& options)
      : SocketTransport(fd, options), header_(options.max_header_bytes) {}

  TransportKind kind() const override { return TransportKind::kTcp; }
  uint32_t capabilities() const override { return StaticCapabilities(kind()); }

  // sendmsg copies before returning, so one header buffer serves all.
  absl::StatusOr<absl::Span<uint8_t>> AcquireHeader() override {
    return absl::MakeSpan(header_);
  }

  absl::Status SendPacket(const OutgoingPacket& packet) override {
    BuildIov(header_.data(), packet);
    return SendIov(
        0,
        [] {
          return absl::ResourceExhaustedError(
              "sendmsg: no buffer space (ENOBUFS)");
        },
        [](size_t) {});
  }

  absl::Status Flush() override { return absl::OkStatus(); }

 private:
  std::vector<uint8_t> header_;
};

}  // namespace

std::unique_ptr<Transport> OpenTcp(int fd, const TransportOptions& options) {
  return std::make_unique<TcpTransport>(fd, options);
}

}  // namespace ramferry::channels
