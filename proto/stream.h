// Byte streams on the data channels: what a session carries for a peer
// that speaks its own protocol (QEMU's migration stream, main and multifd
// channels), as STREAM and STREAM_END packets (proto/packet.h) beside or
// instead of pages.
//
// A stream is numbered (its id travels in the header's region_id) and
// rides one channel, so its packets arrive in order. Each packet says
// where its payload starts in the stream (round): a packet sent again on
// another channel after a loss overlaps what arrived, and the destination
// takes only the bytes past what it holds. STREAM_END gives the stream's
// length, once every byte before it was sent. Stream packets belong to no
// round: they may come between a round's packets, and a receiver does
// not hold their `round` field (the offset) to the channel's round.
//
// Layout in the fixed header (big-endian, as every packet):
//   flags       kPacketStream, or kPacketStreamEnd
//   page_count  0: no offsets follow the fixed part
//   region_id   the stream, below kMaxStreams
//   round       STREAM: the payload's offset in the stream;
//               STREAM_END: the stream's length
//   page_size   STREAM: the payload's bytes, 1..kMaxStreamPayloadBytes;
//               STREAM_END: 0
//   compressed_bytes 0
#ifndef RAMFERRY_PROTO_STREAM_H_
#define RAMFERRY_PROTO_STREAM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/packet.h"

namespace ramferry::proto {

// QEMU opens one main channel and up to 255 multifd channels; a session
// carries at most this many streams at once.
inline constexpr uint32_t kMaxStreams = 256;
// A packet's payload at most: large enough that a send moves a useful
// amount, small enough that a receiver's buffer per channel stays small.
inline constexpr uint32_t kMaxStreamPayloadBytes = 1u << 20;
// Offsets stay below 2^62: no sum of an offset and a payload wraps.
inline constexpr uint64_t kMaxStreamOffset = uint64_t{1} << 62;

// What a STREAM or STREAM_END packet says.
struct StreamFrame {
  uint32_t stream = 0;
  uint64_t offset = 0;  // of the payload; the stream's length at its end
  uint32_t bytes = 0;   // the payload's; 0 at the end
  bool end = false;
  bool operator==(const StreamFrame&) const = default;
};

// The header of `frame` on `channel` as packet `packet_num`; the caller
// sets next_header_bytes where it announces the next one.
PacketHeader StreamHeader(const StreamFrame& frame, uint32_t channel,
                          uint64_t packet_num);

// The frame of a header DecodePacketFixed accepted as a stream packet.
StreamFrame StreamFrameOf(const PacketHeader& header);

// The shape rules above, for a header whose flags say STREAM or
// STREAM_END (DecodePacketFixed runs them): INVALID_ARGUMENT naming the
// field otherwise.
absl::Status CheckStreamShape(const PacketHeader& header);

}  // namespace ramferry::proto

#endif  // RAMFERRY_PROTO_STREAM_H_
