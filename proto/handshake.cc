#include "proto/handshake.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "proto/auth.h"
#include "proto/packet.h"
#include "proto/wire.h"

namespace ramferry::proto {

std::string SessionId::ToHex() const {
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

void EncodeHello(const Hello& h, absl::Span<uint8_t> out) {
  uint8_t* p = out.data();
  std::memset(p, 0, kHelloBytes);
  Store32(p + 0, kHelloMagic);
  Store16(p + 4, kProtocolVersion);
  Store16(p + 6, static_cast<uint16_t>(h.role));
  std::memcpy(p + 8, h.session.bytes.data(), 16);
  Store32(p + 24, h.channel_index);
  Store32(p + 28, h.channel_count);
  Store64(p + 32, h.capabilities);
  Store32(p + 40, h.max_packet_pages);
  Store16(p + 44, h.transport);
  Store16(p + 46, h.auth);
  Store64(p + 48, h.rdma_chunk_bytes);
}

namespace {

// What every Hello opens with, whatever its version: checked first, so
// that a stranger or another release is named as such, not by the first
// field of ours it gets wrong.
absl::Status CheckHelloPreamble(absl::Span<const uint8_t> in) {
  if (in.size() < kHelloBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello truncated: %d of %d bytes", in.size(), kHelloBytes));
  }
  const uint8_t* p = in.data();
  if (uint32_t m = Load32(p); m != kHelloMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello magic 0x%08x, want 0x%08x (not a ramferry peer?)", m,
        kHelloMagic));
  }
  if (uint16_t v = Load16(p + 4); v != kProtocolVersion) {
    return absl::FailedPreconditionError(
        absl::StrFormat("peer speaks protocol version %d, this end speaks %d",
                        v, kProtocolVersion));
  }
  return absl::OkStatus();
}

absl::StatusOr<Role> HelloRole(uint16_t role) {
  if (role != static_cast<uint16_t>(Role::kControl) &&
      role != static_cast<uint16_t>(Role::kData) &&
      role != static_cast<uint16_t>(Role::kUrgent)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello role %d is neither control (1), data (2) nor urgent (3)", role));
  }
  return static_cast<Role>(role);
}

// The session and the channel of it the connection asks to join.
absl::Status CheckHelloChannel(const Hello& h) {
  if (h.session.is_zero()) {
    return absl::InvalidArgumentError("hello session id is all zero");
  }
  if (h.channel_count == 0 || h.channel_count > kMaxChannels) {
    return absl::InvalidArgumentError(
        absl::StrFormat("hello channel count %d outside [1, %d]",
                        h.channel_count, kMaxChannels));
  }
  if (h.channel_index >= h.channel_count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("hello channel index %d not below channel count %d",
                        h.channel_index, h.channel_count));
  }
  return absl::OkStatus();
}

absl::Status CheckMaxPacketPages(uint32_t max_packet_pages) {
  if (max_packet_pages == 0 || max_packet_pages > kMaxPacketPagesLimit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("hello max packet pages %d outside [1, %d]",
                        max_packet_pages, kMaxPacketPagesLimit));
  }
  return absl::OkStatus();
}

absl::Status CheckAuthMethod(uint16_t auth) {
  if (auth != kAuthNone && auth != kAuthHmacSha256) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello asks for authentication method %d; this end knows none (0) "
        "and HMAC-SHA256 (1)",
        auth));
  }
  return absl::OkStatus();
}

// 0 (not RDMA), or a power of two in range.
absl::Status CheckRdmaChunkBytes(uint64_t bytes) {
  if (bytes != 0 && (bytes < kMinRdmaChunkBytes || bytes > kMaxRdmaChunkBytes ||
                     (bytes & (bytes - 1)) != 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello RDMA chunk bytes %d is not a power of two in [%d, %d]", bytes,
        kMinRdmaChunkBytes, kMaxRdmaChunkBytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Hello> DecodeHello(absl::Span<const uint8_t> in) {
  RAMFERRY_RETURN_IF_ERROR(CheckHelloPreamble(in));
  const uint8_t* p = in.data();
  Hello h;
  RAMFERRY_ASSIGN_OR_RETURN(h.role, HelloRole(Load16(p + 6)));
  std::memcpy(h.session.bytes.data(), p + 8, 16);
  h.channel_index = Load32(p + 24);
  h.channel_count = Load32(p + 28);
  h.capabilities = Load64(p + 32);
  h.max_packet_pages = Load32(p + 40);
  h.transport = Load16(p + 44);
  h.auth = Load16(p + 46);
  h.rdma_chunk_bytes = Load64(p + 48);
  // In the order the fields' checks have always been reported.
  RAMFERRY_RETURN_IF_ERROR(CheckHelloChannel(h));
  RAMFERRY_RETURN_IF_ERROR(CheckMaxPacketPages(h.max_packet_pages));
  RAMFERRY_RETURN_IF_ERROR(CheckAuthMethod(h.auth));
  RAMFERRY_RETURN_IF_ERROR(CheckRdmaChunkBytes(h.rdma_chunk_bytes));
  return h;
}

void EncodeHelloReply(const HelloReply& r, absl::Span<uint8_t> out) {
  uint8_t* p = out.data();
  std::memset(p, 0, kHelloReplyBytes);
  Store32(p + 0, kHelloReplyMagic);
  Store16(p + 4, kProtocolVersion);
  Store16(p + 6, r.status);
  Store64(p + 8, r.capabilities);
  // Keep one NUL so the field always terminates.
  size_t n = std::min(r.reason.size(), kHelloReasonBytes - 1);
  std::memcpy(p + 16, r.reason.data(), n);
}

absl::StatusOr<HelloReply> DecodeHelloReply(absl::Span<const uint8_t> in) {
  if (in.size() < kHelloReplyBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello reply truncated: %d of %d bytes", in.size(), kHelloReplyBytes));
  }
  const uint8_t* p = in.data();
  if (uint32_t m = Load32(p); m != kHelloReplyMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello reply magic 0x%08x, want 0x%08x", m, kHelloReplyMagic));
  }
  if (uint16_t v = Load16(p + 4); v != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "peer replied with protocol version %d, this end speaks %d", v,
        kProtocolVersion));
  }
  HelloReply r;
  r.status = Load16(p + 6);
  r.capabilities = Load64(p + 8);
  const char* reason = reinterpret_cast<const char*>(p + 16);
  size_t n = strnlen(reason, kHelloReasonBytes);
  r.reason.assign(reason, n);
  // Only printable text reaches logs and error messages.
  for (char& c : r.reason) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  if (r.status > static_cast<uint16_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello reply status %d is not a status code", r.status));
  }
  return r;
}

absl::Status HelloReplyStatus(const HelloReply& r) {
  if (r.accepted()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(r.status),
                      absl::StrCat("peer refused the connection: ", r.reason));
}

}  // namespace ramferry::proto
