#include "tests/support/memory_transport.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"

namespace ramferry::testing {

absl::StatusOr<absl::Span<uint8_t>> MemoryTransport::AcquireHeader() {
  return absl::UnimplementedError("MemoryTransport is receive-only");
}

absl::Status MemoryTransport::SendPacket(const channels::OutgoingPacket&) {
  return absl::UnimplementedError("MemoryTransport is receive-only");
}

absl::Status MemoryTransport::Flush() {
  return absl::UnimplementedError("MemoryTransport is receive-only");
}

void MemoryTransport::Shutdown() { shut_down_ = true; }

absl::Status MemoryTransport::ReadExact(absl::Span<uint8_t> buf,
                                        bool at_packet_boundary) {
  if (at_packet_boundary) packet_start_ = pos_;
  iovec v{buf.data(), buf.size()};
  return Copy(absl::MakeConstSpan(&v, 1), at_packet_boundary);
}

absl::Status MemoryTransport::ReadPayload(absl::Span<const iovec> dst) {
  if (on_payload_) on_payload_(dst);
  return Copy(dst, /*at_packet_boundary=*/false);
}

absl::Status MemoryTransport::Copy(absl::Span<const iovec> dst,
                                   bool at_packet_boundary) {
  if (shut_down_) {
    return absl::AbortedError("read interrupted: session is ending");
  }
  stats_.recv_calls.Add();
  size_t total = 0;
  size_t done = 0;
  for (const iovec& v : dst) {
    total += v.iov_len;
    const size_t n = std::min(v.iov_len, stream_.size() - pos_);
    // memcpy with a null source is undefined even for zero bytes.
    if (n != 0) std::memcpy(v.iov_base, stream_.data() + pos_, n);
    pos_ += n;
    done += n;
  }
  if (done == total) return absl::OkStatus();
  if (done == 0 && at_packet_boundary) {
    return absl::UnavailableError("connection closed by peer");
  }
  return absl::UnavailableError(absl::StrFormat(
      "connection closed by peer mid-packet, after %d of %d bytes", done,
      total));
}

}  // namespace ramferry::testing
