// A receive-only Transport over a byte buffer, for driving a ChannelReceiver
// without sockets: the fuzzer serves its input as the received stream, and
// unit tests replay exact byte sequences. It reports the end of the buffer
// the way a socket reports the peer closing (UNAVAILABLE), and hands every
// payload destination to an optional observer before writing to it, so a
// caller can check where the receiver is about to put bytes.
#ifndef RAMFERRY_TESTS_SUPPORT_MEMORY_TRANSPORT_H_
#define RAMFERRY_TESTS_SUPPORT_MEMORY_TRANSPORT_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "channels/transport.h"

namespace ramferry::testing {

class MemoryTransport : public channels::Transport {
 public:
  // Called with the destination spans of each ReadPayload before any byte
  // lands in them.
  using PayloadObserver = std::function<void(absl::Span<const iovec>)>;

  // `stream` must outlive the transport.
  explicit MemoryTransport(absl::Span<const uint8_t> stream,
                           PayloadObserver on_payload = nullptr)
      : stream_(stream), on_payload_(std::move(on_payload)) {}

  TransportKind kind() const override { return TransportKind::kTcp; }
  uint32_t capabilities() const override { return 0; }

  // Receive-only: every send-side call fails.
  absl::StatusOr<absl::Span<uint8_t>> AcquireHeader() override;
  absl::Status SendPacket(const channels::OutgoingPacket& packet) override;
  absl::Status Flush() override;

  // Like a socket whose peer wrote `stream` and closed: at a packet
  // boundary with nothing left, "connection closed by peer"; otherwise the
  // bytes that are there are delivered, then UNAVAILABLE mid-packet.
  absl::Status ReadExact(absl::Span<uint8_t> buf,
                         bool at_packet_boundary) override;
  absl::Status ReadPayload(absl::Span<const iovec> dst) override;
  void Shutdown() override;

  // Bytes of the stream consumed so far.
  size_t position() const { return pos_; }
  // Where the packet being read began: the position of the last read made
  // at a packet boundary.
  size_t packet_start() const { return packet_start_; }

 private:
  absl::Status Copy(absl::Span<const iovec> dst, bool at_packet_boundary);

  absl::Span<const uint8_t> stream_;
  PayloadObserver on_payload_;
  size_t pos_ = 0;
  size_t packet_start_ = 0;
  bool shut_down_ = false;
};

}  // namespace ramferry::testing

#endif  // RAMFERRY_TESTS_SUPPORT_MEMORY_TRANSPORT_H_
