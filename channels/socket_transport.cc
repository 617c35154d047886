#include "channels/socket_transport.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/time/clock.h"
#include "channels/socket_io.h"

namespace ramferry::channels {

SocketTransport::SocketTransport(int fd, const TransportOptions& options)
    : fd_(fd), options_(options) {}

SocketTransport::~SocketTransport() { close(fd_); }

void SocketTransport::Shutdown() {
  stop_.store(true, std::memory_order_release);
  // Wakes a thread blocked in send or recv on this socket; the fd itself
  // stays open until destruction, so no other thread can reuse its number.
  ::shutdown(fd_, SHUT_RDWR);
}

absl::Status SocketTransport::ReadExact(absl::Span<uint8_t> buf,
                                        bool at_packet_boundary) {
  iovec v{buf.data(), buf.size()};
  size_t calls = 0;
  absl::Status s =
      ReadAll(fd_, absl::MakeSpan(&v, 1), at_packet_boundary ? 0 : kNoIdle,
              options_.stall_timeout, stop_, &calls);
  stats_.recv_calls.Add(calls);
  return s;
}

absl::Status SocketTransport::ReadPayload(absl::Span<const iovec> dst) {
  iov_.assign(dst.begin(), dst.end());
  size_t calls = 0;
  absl::Status s = ReadAll(fd_, absl::MakeSpan(iov_), kNoIdle,
                           options_.stall_timeout, stop_, &calls);
  stats_.recv_calls.Add(calls);
  return s;
}

absl::Status SocketTransport::ReadPayloadAndHeader(
    absl::Span<const iovec> dst, absl::Span<uint8_t> next_header) {
  iov_.assign(dst.begin(), dst.end());
  iov_.push_back({next_header.data(), next_header.size()});
  size_t calls = 0;
  absl::Status s = ReadAll(fd_, absl::MakeSpan(iov_), IovBytes(dst),
                           options_.stall_timeout, stop_, &calls);
  stats_.recv_calls.Add(calls);
  return s;
}

absl::Status SocketTransport::CheckDelivery() {
  // Bytes in the send queue: for TCP, not yet acknowledged (sent or not);
  // for a unix socket, not yet read. A socket that cannot say is not
  // watched.
  int queued = 0;
  if (ioctl(fd_, SIOCOUTQ, &queued) != 0 || queued < 0) {
    return absl::OkStatus();
  }
  return delivery_.Look(static_cast<uint64_t>(queued), stats_.send_calls.get(),
                        absl::Now());
}

void SocketTransport::BuildIov(const void* header,
                               const OutgoingPacket& packet) {
  iov_.clear();
  iov_.push_back({const_cast<void*>(header), packet.header_bytes});
  iov_.insert(iov_.end(), packet.payload.begin(), packet.payload.end());
}

absl::Status SocketTransport::SendIov(
    int flags, absl::FunctionRef<absl::Status()> on_no_buffers,
    absl::FunctionRef<void(size_t)> on_call) {
  // Named, not a temporary: SendHooks holds FunctionRefs to it.
  auto count_call = [&](size_t bytes, bool partial) {
    stats_.send_calls.Add();
    stats_.submit_calls.Add();
    if (partial) stats_.short_sends.Add();
    on_call(bytes);
  };
  SendHooks hooks{count_call, on_no_buffers};
  return SendAll(fd_, absl::MakeSpan(iov_), flags | MSG_NOSIGNAL,
                 options_.stall_timeout, stop_, hooks);
}

}  // namespace ramferry::channels
