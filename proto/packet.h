// The data-channel packet header: what every page batch, round SYNC and
// FINISH carries on the wire, ahead of its pages.
//
// Layout (big-endian, 64 fixed bytes, then page_count u64 offsets):
//    0 u32 magic 'RFPK'      4 u16 version        6 u16 flags
//    8 u32 channel          12 u32 page_count
//   16 u64 packet_num       24 u64 round
//   32 u32 region_id        36 u32 page_size
//   40 u32 next_header_bytes: with kFeatureNextHeaderSize (proto/handshake.h),
//             the size of the header that follows this packet on the
//             channel (64 + 8 * its page_count), or 0 when the sender did
//             not know it yet; without the capability always 0. It lets the
//             receiver read a packet's payload and the whole next header in
//             one call and still validate that header before asking for a
//             byte of its payload.
//   44 u32 compressed_bytes: with kFeatureCompressedPages, on a data packet,
//             non-zero when the payload is one zstd frame of this many
//             bytes that expands to the packet's pages (those not flagged
//             zero), in offset order; 0: the pages as they are. Without
//             the capability always 0.
//   48 u8[16] tag: on a sealed stream (kFeatureSealMac/Encrypt,
//             proto/seal.h), the packet's AES-256-GCM tag, computed with
//             these bytes zero over the whole header (offsets included)
//             and the payload as it goes on the wire; otherwise zero.
//   64 u64 offsets[page_count]: byte offset of each page in its region.
//             With kFeatureZeroPages, bit 0 of an offset (free: offsets are
//             page-aligned) marks a page that is all zero: its bytes are
//             not in the payload and the destination makes it zero.
//             With kFeatureDeltaPages, bits 1 and up below the page size
//             (free too) may instead hold the size of a delta record
//             (proto/page_delta.h) that stands for the page: entry =
//             offset | bytes << 1, 1 <= bytes <= MaxDeltaBytes(page_size).
//
// A data packet's payload is its whole pages, in entry order, then its
// delta records, in entry order: the receiver reads the pages into place
// and the records aside, and applies each record, once the payload is
// authentic, to the page it already holds. With compressed_bytes the zstd
// frame expands to that same payload.
//
// A ZERO_RANGES packet (kFeatureZeroPages) carries page_count u64 words after
// the fixed part, read as (offset, length) pairs: byte ranges of its
// region, page-aligned, ascending and disjoint, that read as zero (the
// source never touched them). No payload follows. Keeping the pairs in
// the header's offset array keeps every header size rule (the
// announcement, the max_pages bound, the header slot size) the same.
//
// STREAM and STREAM_END packets (PacketFeatures::streams) carry a byte
// stream instead of pages (proto/stream.h): region_id names the stream,
// round is the offset of the payload in it (of STREAM_END: the stream's
// length), page_size the payload's bytes (0 for STREAM_END), page_count
// 0. The payload follows the fixed part as it is, and a sealed stream's
// tag covers it as it covers pages.
#ifndef RAMFERRY_PROTO_PACKET_H_
#define RAMFERRY_PROTO_PACKET_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ramferry::proto {

inline constexpr uint32_t kPacketMagic = 0x5246504B;  // "RFPK"
// 2: Hello carries the authentication method (proto/auth.h).
// 3: the stream keys bind the HelloReply (proto/seal.h DeriveSealKeys).
inline constexpr uint16_t kProtocolVersion = 3;
inline constexpr size_t kPacketFixedBytes = 64;
inline constexpr size_t kPacketTagOffset = 48;
inline constexpr size_t kPacketTagBytes = 16;
// No peer may negotiate more pages per packet than this; it bounds the
// header buffer a receiver allocates before it trusts anything.
inline constexpr uint32_t kMaxPacketPagesLimit = 4096;
inline constexpr uint32_t kDefaultPacketPages = 128;

enum PacketFlag : uint16_t {
  kPacketData = 0,
  // Round barrier: every packet of `round` on this channel came before it.
  kPacketSync = 1u << 0,
  // End of stream on this channel; nothing may follow it.
  kPacketFinish = 1u << 1,
  // Zero ranges of a region for this round (kFeatureZeroPages).
  kPacketZeroRanges = 1u << 2,
  // Bytes of a stream, and a stream's end (PacketFeatures::streams).
  kPacketStream = 1u << 3,
  kPacketStreamEnd = 1u << 4,
};
inline constexpr uint16_t kKnownPacketFlags = kPacketSync | kPacketFinish |
                                              kPacketZeroRanges |
                                              kPacketStream | kPacketStreamEnd;

// Bit 0 of a page offset: the page is all zero and not in the payload.
inline constexpr uint64_t kZeroPageFlag = 1;
constexpr bool IsZeroPageEntry(uint64_t entry) {
  return (entry & kZeroPageFlag) != 0;
}
constexpr uint64_t PageOffsetOf(uint64_t entry) {
  return entry & ~kZeroPageFlag;
}
// A page entry for a page of `offset` that travels as a delta record of
// `bytes` bytes (kFeatureDeltaPages).
inline constexpr uint32_t kDeltaLengthShift = 1;
constexpr uint64_t DeltaPageEntry(uint64_t offset, uint32_t bytes) {
  return offset | uint64_t{bytes} << kDeltaLengthShift;
}
// The delta record size an entry of a validated packet names, 0 for a
// whole or zero page.
constexpr uint32_t DeltaBytesOf(uint64_t entry, uint32_t page_size) {
  return IsZeroPageEntry(entry)
             ? 0
             : static_cast<uint32_t>((entry & (page_size - 1)) >>
                                     kDeltaLengthShift);
}
// Whether the page's bytes are in the payload as they are.
constexpr bool IsWholePageEntry(uint64_t entry, uint32_t page_size) {
  return (entry & (page_size - 1)) == 0;
}

// What the two ends negotiated that changes how a header is read.
struct PacketFeatures {
  // next_header_bytes may be non-zero (kFeatureNextHeaderSize).
  bool next_header_size = false;
  // Offsets may carry kZeroPageFlag; ZERO_RANGES packets may come
  // (kFeatureZeroPages).
  bool zero_pages = false;
  // compressed_bytes may be non-zero (kFeatureCompressedPages), up to
  // kMaxCompressedBytes.
  bool compressed_pages = false;
  // The tag bytes hold a tag (a sealed stream), not zeros.
  bool sealed = false;
  // Page entries may name delta records (kFeatureDeltaPages).
  bool delta_pages = false;
  // STREAM and STREAM_END packets may come (proto/stream.h).
  bool streams = false;
};

// The most bytes one compressed payload may take on the wire; a frame
// must also be smaller than the pages it expands to.
inline constexpr uint32_t kMaxCompressedBytes = 4u << 20;

struct PacketHeader {
  uint16_t flags = kPacketData;
  uint32_t channel = 0;
  uint32_t page_count = 0;
  uint64_t packet_num = 0;
  uint64_t round = 0;
  uint32_t region_id = 0;
  uint32_t page_size = 0;
  uint32_t next_header_bytes = 0;  // 0: not announced
  uint32_t compressed_bytes = 0;   // 0: the payload is not compressed

  bool is_data() const { return flags == kPacketData; }
  bool is_zero_ranges() const { return flags == kPacketZeroRanges; }
  bool is_stream() const {
    return flags == kPacketStream || flags == kPacketStreamEnd;
  }
  // Both kinds name a region and carry page_count words after the fixed
  // part.
  bool names_region() const { return is_data() || is_zero_ranges(); }
};

constexpr size_t PacketHeaderBytes(uint32_t page_count) {
  return kPacketFixedBytes + sizeof(uint64_t) * page_count;
}

// Writes the fixed part and `offsets` (which must hold header.page_count
// entries) into `out`, which must hold PacketHeaderBytes(page_count) bytes.
// Returns the number of bytes written.
size_t EncodePacketHeader(const PacketHeader& header,
                          absl::Span<const uint64_t> offsets,
                          absl::Span<uint8_t> out);

// Decodes and validates the fixed 64 bytes of a packet received on channel
// `channel`: magic, version, flags, channel, page count bound, reserved
// bytes, and the shape rules (a data packet has pages; a ZERO_RANGES
// packet, only with features.zero_pages, has an even word count of at
// least 2; SYNC and FINISH have none and name no region; STREAM and
// STREAM_END, only with features.streams, as proto/stream.h says). With
// features.next_header_size, next_header_bytes may be non-zero; it must
// then be a header size for at most `max_pages` pages, and 0 on FINISH
// (nothing follows it). Region lookup and offsets come after, with
// DecodePageOffsets or DecodeZeroRanges, once the region is known.
absl::StatusOr<PacketHeader> DecodePacketFixed(absl::Span<const uint8_t> fixed,
                                               uint32_t channel,
                                               uint32_t max_pages,
                                               PacketFeatures features);

// Decodes header.page_count big-endian offsets from `raw` into `out` and
// checks each one against a region of `region_length` bytes whose pages
// are `page_size` bytes: aligned, and the whole page inside the region.
// With `zero_pages`, an entry may carry kZeroPageFlag, kept in `out`.
absl::Status DecodePageOffsets(const PacketHeader& header,
                               absl::Span<const uint8_t> raw,
                               uint64_t region_length, bool zero_pages,
                               absl::Span<uint64_t> out);
// The same where the entries may also name delta records
// (features.delta_pages), kept in `out` as they came (DeltaBytesOf).
absl::Status DecodePageOffsets(const PacketHeader& header,
                               absl::Span<const uint8_t> raw,
                               uint64_t region_length, PacketFeatures features,
                               absl::Span<uint64_t> out);

struct ZeroRange {
  uint64_t offset = 0;
  uint64_t length = 0;
  bool operator==(const ZeroRange&) const = default;
};

// The most (offset, length) pairs one ZERO_RANGES packet carries.
constexpr uint32_t MaxZeroRangesPerPacket(uint32_t max_pages) {
  return max_pages / 2;
}

// Decodes a ZERO_RANGES packet's header.page_count / 2 pairs from `raw`
// into `out` (room for that many) and checks them against a region of
// `region_length` bytes whose pages are header.page_size bytes: each range
// page-aligned, not empty, inside the region, and after the one before it
// (ascending and disjoint), so applying them cannot touch a byte twice or
// outside the region.
absl::Status DecodeZeroRanges(const PacketHeader& header,
                              absl::Span<const uint8_t> raw,
                              uint64_t region_length,
                              absl::Span<ZeroRange> out);

}  // namespace ramferry::proto

#endif  // RAMFERRY_PROTO_PACKET_H_
