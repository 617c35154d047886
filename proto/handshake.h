// The first bytes of every connection: the connector's Hello and the
// listener's HelloReply. A Hello binds the connection to one session (a
// random 128-bit id chosen by the source) and, for a data channel, to one
// channel index; capability bits are negotiated as the intersection of what
// both ends offer.
//
// Hello (56 bytes, big-endian):
//    0 u32 magic 'RFHS'   4 u16 version   6 u16 role (1 control, 2 data)
//    8 u8[16] session id
//   24 u32 channel index  28 u32 channel count
//   32 u64 capabilities
//   40 u32 max packet pages   44 u16 transport
//   46 u16 auth (proto/auth.h: 0 none, 1 HMAC-SHA256)
//   48 u64 RDMA chunk bytes (the registration unit both ends compute chunk
//          spans with; 0 for every other transport)
// HelloReply (128 bytes):
//    0 u32 magic 'RFHR'   4 u16 version   6 u16 status (0 = accepted)
//    8 u64 capabilities granted
//   16 char[112] reason, NUL-padded (empty when accepted)
#ifndef RAMFERRY_PROTO_HANDSHAKE_H_
#define RAMFERRY_PROTO_HANDSHAKE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ramferry::proto {

inline constexpr uint32_t kHelloMagic = 0x52464853;       // "RFHS"
inline constexpr uint32_t kHelloReplyMagic = 0x52464852;  // "RFHR"
inline constexpr size_t kHelloBytes = 56;
inline constexpr size_t kHelloReplyBytes = 128;
inline constexpr size_t kHelloReasonBytes = kHelloReplyBytes - 16;
inline constexpr uint32_t kMaxChannels = 256;

// kUrgent: post-copy's urgent channel (kFeaturePostcopy with
// SessionOptions::postcopy_urgent_channel), a second framed connection
// that carries only page requests and their answers.
enum class Role : uint16_t { kControl = 1, kData = 2, kUrgent = 3 };

// Session features, negotiated in the Hello's capabilities field: a bit is
// in effect only when both ends set it. (A transport's own promises are
// channels::TransportCapability, kCap*: local, never on the wire.)
enum Feature : uint64_t {
  // The destination can checksum its regions on request (Verify).
  kFeatureVerify = 1ull << 0,
  // RDMA: the destination registers whole regions up front and sends their
  // keys (otherwise chunks are registered on demand).
  kFeatureRdmaPinAll = 1ull << 1,
  // RDMA: one REGISTER_REQUEST may name many chunks (otherwise one each).
  kFeatureRdmaRegBatch = 1ull << 2,
  // A dead data channel does not end the session: the source re-sends its
  // unconfirmed batches on the others and tells the destination over the
  // control connection (CHANNEL_LOST / CHANNEL_GONE / CHANNEL_GONE_ACK).
  kFeatureSurviveChannelLoss = 1ull << 3,
  // Every packet header announces the size of the header after it
  // (PacketHeader::next_header_bytes), so the destination reads a payload
  // and the next header in one call.
  kFeatureNextHeaderSize = 1ull << 4,
  // The destination hashes every page as it lands and answers a verify
  // request from those digests, without reading its memory again.
  kFeatureArrivalDigests = 1ull << 5,
  // All-zero pages travel as flagged offsets with no payload, and pages
  // the source never touched as ZERO_RANGES packets (proto/packet.h).
  kFeatureZeroPages = 1ull << 6,
  // A data packet's payload may be one zstd frame of its pages
  // (PacketHeader::compressed_bytes).
  kFeatureCompressedPages = 1ull << 7,
  // RDMA: the destination grants the source receive credits (RFRC messages
  // on the data queue pair, channels/rdma/credits.h) and the source never
  // posts a SEND beyond them, so
  // no SEND ever meets an empty receive queue (RNR retries).
  kFeatureRdmaCredits = 1ull << 8,
  // The stream is sealed (proto/seal.h): with kFeatureSealMac every
  // message carries a GMAC tag, with kFeatureSealEncrypt its body is
  // encrypted too. Not negotiated like the others: the source asks for at
  // most one, and the destination grants exactly that or refuses, so the
  // mode in force is the one in the (authenticated) Hello.
  kFeatureSealMac = 1ull << 9,
  kFeatureSealEncrypt = 1ull << 10,
  // Post-copy (proto/postcopy.h): MISSING_PAGES, POSTCOPY_ARMED,
  // PAGE_REQUEST, PAGE_DATA and POSTCOPY_COMPLETE on the control
  // connection, and an urgent connection where the source opens one.
  kFeaturePostcopy = 1ull << 11,
  // With kFeaturePostcopy: the source opens an urgent connection (a Hello
  // of Role::kUrgent) for page requests and their answers.
  kFeaturePostcopyUrgent = 1ull << 12,
  // With kFeaturePostcopy, in a control Hello: this session resumes the
  // post-copy of the session with the same id, which lost its connections
  // (the destination answers with what it still lacks).
  kFeaturePostcopyResume = 1ull << 13,
  // A data packet's page entries may name delta records: a page re-sent
  // as what changed since the copy the destination holds
  // (proto/page_delta.h, proto/packet.h).
  kFeatureDeltaPages = 1ull << 14,
  // The session carries byte streams (proto/stream.h, STREAM packets;
  // proto/stream_control.h, their control messages), and has no regions.
  kFeatureStreams = 1ull << 15,
};
inline constexpr uint64_t kKnownFeatures =
    kFeatureVerify | kFeatureRdmaPinAll | kFeatureRdmaRegBatch |
    kFeatureSurviveChannelLoss | kFeatureNextHeaderSize |
    kFeatureArrivalDigests | kFeatureZeroPages | kFeatureCompressedPages |
    kFeatureRdmaCredits | kFeatureSealMac | kFeatureSealEncrypt |
    kFeaturePostcopy | kFeaturePostcopyUrgent | kFeaturePostcopyResume |
    kFeatureDeltaPages | kFeatureStreams;

struct SessionId {
  std::array<uint8_t, 16> bytes{};
  bool operator==(const SessionId&) const = default;
  bool is_zero() const { return *this == SessionId{}; }
  std::string ToHex() const;
};

struct Hello {
  Role role = Role::kControl;
  SessionId session;
  uint32_t channel_index = 0;
  uint32_t channel_count = 1;
  uint64_t capabilities = 0;
  uint32_t max_packet_pages = 0;
  uint16_t transport = 0;  // a TransportKind; its meaning is the channels'
  uint16_t auth = 0;       // kAuthNone or kAuthHmacSha256 (proto/auth.h)
  uint64_t rdma_chunk_bytes = 0;
};

// A Hello's rdma_chunk_bytes: 0, or a power of two in [min, max]. Which
// transports must send one (those that register memory in chunks) is the
// transport layer's to say: channels::DecodeChannelHello.
inline constexpr uint64_t kMinRdmaChunkBytes = 4096;
inline constexpr uint64_t kMaxRdmaChunkBytes = 1ull << 30;

struct HelloReply {
  uint16_t status = 0;  // 0 accepted; otherwise an absl::StatusCode
  uint64_t capabilities = 0;
  std::string reason;

  bool accepted() const { return status == 0; }
};

void EncodeHello(const Hello& hello, absl::Span<uint8_t> out);
// Checks everything a Hello can be checked for alone: magic, version, role,
// channel index < count <= kMaxChannels, page bound, the chunk size's form.
// Capability bits this build does not know are not refused here. What depends
// on the transport is checked by channels::DecodeChannelHello, which every
// listener decodes with.
absl::StatusOr<Hello> DecodeHello(absl::Span<const uint8_t> in);

void EncodeHelloReply(const HelloReply& reply, absl::Span<uint8_t> out);
absl::StatusOr<HelloReply> DecodeHelloReply(absl::Span<const uint8_t> in);

// A refusal carries its reason as a status; an acceptance is OK.
absl::Status HelloReplyStatus(const HelloReply& reply);

}  // namespace ramferry::proto

#endif  // RAMFERRY_PROTO_HANDSHAKE_H_
