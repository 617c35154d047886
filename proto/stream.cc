#include "proto/stream.h"

#include "absl/strings/str_format.h"

namespace ramferry::proto {

PacketHeader StreamHeader(const StreamFrame& frame, uint32_t channel,
                          uint64_t packet_num) {
  PacketHeader h;
  h.flags = frame.end ? kPacketStreamEnd : kPacketStream;
  h.channel = channel;
  h.packet_num = packet_num;
  h.round = frame.offset;
  h.region_id = frame.stream;
  h.page_size = frame.end ? 0 : frame.bytes;
  return h;
}

StreamFrame StreamFrameOf(const PacketHeader& h) {
  const bool end = h.flags == kPacketStreamEnd;
  return StreamFrame{.stream = h.region_id,
                     .offset = h.round,
                     .bytes = end ? 0 : h.page_size,
                     .end = end};
}

absl::Status CheckStreamShape(const PacketHeader& h) {
  const bool end = h.flags == kPacketStreamEnd;
  const char* what = end ? "STREAM_END" : "STREAM";
  if (h.page_count != 0 || h.compressed_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s packet carries page_count %d compressed_bytes %d; want 0", what,
        h.page_count, h.compressed_bytes));
  }
  if (h.region_id >= kMaxStreams) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s packet names stream %d; streams are numbered below %d", what,
        h.region_id, kMaxStreams));
  }
  if (end ? h.page_size != 0
          : h.page_size == 0 || h.page_size > kMaxStreamPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s packet carries %d payload bytes; want %s", what, h.page_size,
        end ? "0" : absl::StrFormat("1 to %d", kMaxStreamPayloadBytes)));
  }
  if (h.round > kMaxStreamOffset - h.page_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s packet at stream offset %d; a stream ends below %d",
                        what, h.round, kMaxStreamOffset));
  }
  return absl::OkStatus();
}

}  // namespace ramferry::proto
