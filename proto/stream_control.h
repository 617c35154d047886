// The control messages of a session that carries byte streams
// (kFeatureStreams; proto/stream.h has the data packets): opening each
// stream, and the bytes its destination peer sends back.
//
// The source opens streams one at a time, in the order its peer (QEMU)
// connected, and waits for each to be opened: QEMU's destination takes the
// first connection it accepts as its main channel, so the order must hold.
//
// STREAM_OPEN, STREAM_OPENED (payload 4 bytes, big-endian):
//    0 u32 stream         below kMaxStreams
// STREAM_BACK (destination -> source; what the destination's peer wrote
// on the stream's connection, in order):
//    0 u32 stream
//    4 u64 offset         of these bytes in the back direction
//   12 1 to kMaxStreamBackBytes bytes
// STREAM_BACK_END (the destination's peer closed its sending side):
//    0 u32 stream
//    4 u64 length         of the back direction, every byte sent before
// STREAM_ACK (destination -> source: every byte below `offset` reached
// the destination's peer; the source may drop them, and after a lost
// channel resends from there):
//    0 u32 stream
//    4 u64 offset
//   12 u32 flags          bit 0 kStreamAckEnd: the end came too; other
//                         bits zero
//
// The back direction rides the control connection: it is sealed and
// duplex already, carries little (QEMU's return path: acks, and
// post-copy's page requests), and is not queued behind a data channel.
#ifndef RAMFERRY_PROTO_STREAM_CONTROL_H_
#define RAMFERRY_PROTO_STREAM_CONTROL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ramferry::proto {

inline constexpr uint32_t kMaxStreamBackBytes = 64u << 10;

struct StreamBack {
  uint32_t stream = 0;
  uint64_t offset = 0;
  // Valid while the payload it was decoded from is.
  absl::Span<const uint8_t> bytes;
};

struct StreamBackEnd {
  uint32_t stream = 0;
  uint64_t length = 0;
  bool operator==(const StreamBackEnd&) const = default;
};

inline constexpr uint32_t kStreamAckEnd = 1;

struct StreamAck {
  uint32_t stream = 0;
  uint64_t offset = 0;
  bool end = false;
  bool operator==(const StreamAck&) const = default;
};

std::vector<uint8_t> EncodeStreamOpen(uint32_t stream);
std::vector<uint8_t> EncodeStreamAck(const StreamAck& ack);
std::vector<uint8_t> EncodeStreamOpened(uint32_t stream);
// `bytes`: 1 to kMaxStreamBackBytes of them.
std::vector<uint8_t> EncodeStreamBack(uint32_t stream, uint64_t offset,
                                      absl::Span<const uint8_t> bytes);
std::vector<uint8_t> EncodeStreamBackEnd(const StreamBackEnd& end);

// STREAM_OPEN's and STREAM_OPENED's payload: the stream. INVALID_ARGUMENT
// for another size or a stream at or past kMaxStreams.
absl::StatusOr<uint32_t> DecodeStreamId(absl::Span<const uint8_t> payload);
// INVALID_ARGUMENT for a stream at or past kMaxStreams, no bytes, more
// than kMaxStreamBackBytes, or an offset past kMaxStreamOffset.
absl::StatusOr<StreamBack> DecodeStreamBack(absl::Span<const uint8_t> payload);
absl::StatusOr<StreamBackEnd> DecodeStreamBackEnd(
    absl::Span<const uint8_t> payload);
// INVALID_ARGUMENT for another size, a stream past the bound, an offset
// past kMaxStreamOffset or unknown flags.
absl::StatusOr<StreamAck> DecodeStreamAck(absl::Span<const uint8_t> payload);

}  // namespace ramferry::proto

#endif  // RAMFERRY_PROTO_STREAM_CONTROL_H_
