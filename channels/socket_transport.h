// What every socket-based transport shares: the connected fd, the receive
// path (header reads and readv straight into place) and shutdown. The
// transports differ only in how they send.
#ifndef RAMFERRY_CHANNELS_SOCKET_TRANSPORT_H_
#define RAMFERRY_CHANNELS_SOCKET_TRANSPORT_H_

#include <algorithm>
#include <atomic>
#include <vector>

#include "channels/delivery_watch.h"
#include "channels/transport.h"

namespace ramferry::channels {

class SocketTransport : public Transport {
 public:
  // Takes ownership of the connected socket `fd`.
  SocketTransport(int fd, const TransportOptions& options);
  ~SocketTransport() override;

  absl::Status ReadExact(absl::Span<uint8_t> buf,
                         bool at_packet_boundary) override;
  absl::Status ReadPayload(absl::Span<const iovec> dst) override;
  absl::Status ReadPayloadAndHeader(absl::Span<const iovec> dst,
                                    absl::Span<uint8_t> next_header) override;
  void Shutdown() override;
  // Checks delivery (the kernel's count of bytes not yet taken by the
  // peer); transports that reap completions do that first.
  absl::Status Poll() override { return CheckDelivery(); }
  // Four looks a stall timeout: a stall is seen within 1.25 of it. The
  // floor keeps an absurdly short timeout from spinning an idle channel.
  absl::Duration idle_poll_interval() const override {
    return std::max(options_.stall_timeout / 4, absl::Milliseconds(1));
  }

 protected:
  absl::Status CheckDelivery();
  // Sends `iov` (header first) with sendmsg `flags`, counting calls.
  absl::Status SendIov(int flags,
                       absl::FunctionRef<absl::Status()> on_no_buffers,
                       absl::FunctionRef<void(size_t)> on_call);
  // iov_ = [header, payload...], reusing its capacity.
  void BuildIov(const void* header, const OutgoingPacket& packet);
  bool stopping() const { return stop_.load(std::memory_order_acquire); }

  const int fd_;
  const TransportOptions options_;
  std::vector<iovec> iov_;
  std::atomic<bool> stop_{false};
  DeliveryWatch delivery_{options_.stall_timeout};
};

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_SOCKET_TRANSPORT_H_
