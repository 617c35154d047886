// STREAM and STREAM_END packets (proto/stream.h): their headers round
// trip through the wire, and DecodePacketFixed refuses every shape the
// header comment rules out, naming the field, and any stream packet on a
// session that did not ask for streams.
#include "proto/stream.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/packet.h"
#include "tests/support/status_matchers.h"

namespace ramferry::proto {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint32_t kChannel = 3;
constexpr uint32_t kMaxPages = 128;
// With compression's field open, so that a stream packet's own rule on
// it is what refuses a value there.
constexpr PacketFeatures kStreams{
    .next_header_size = true, .compressed_pages = true, .streams = true};

absl::StatusOr<PacketHeader> WireTrip(const PacketHeader& h,
                                      PacketFeatures features = kStreams) {
  std::vector<uint8_t> buf(PacketHeaderBytes(h.page_count));
  const std::vector<uint64_t> offsets(h.page_count);  // a wrong header's
  EncodePacketHeader(h, offsets, absl::MakeSpan(buf));
  return DecodePacketFixed(buf, kChannel, kMaxPages, features);
}

TEST(StreamPacket, DataAndEndRoundTripThroughTheWire) {
  for (const StreamFrame& frame :
       {StreamFrame{.stream = 0, .offset = 0, .bytes = 1},
        StreamFrame{.stream = 255,
        .offset = kMaxStreamOffset - kMaxStreamPayloadBytes,
        .bytes = kMaxStreamPayloadBytes},
        StreamFrame{.stream = 2, .offset = 123456789, .end = true}}) {
    PacketHeader h = StreamHeader(frame, kChannel, 42);
    h.next_header_bytes = frame.end ? 0 : 64;
    absl::StatusOr<PacketHeader> back = WireTrip(h);
    ASSERT_OK(back);
    EXPECT_TRUE(back->is_stream());
    EXPECT_FALSE(back->is_data());
    EXPECT_EQ(back->packet_num, 42u);
    EXPECT_EQ(back->next_header_bytes, h.next_header_bytes);
    EXPECT_EQ(StreamFrameOf(*back), frame);
  }
}

TEST(StreamPacket, IsRefusedWhereTheSessionCarriesNoStreams) {
  const PacketHeader h =
      StreamHeader({.stream = 1, .offset = 0, .bytes = 10}, kChannel, 0);
  EXPECT_THAT(WireTrip(h, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("STREAM packet on a session that carries "
                                 "no streams")));
  PacketHeader end = StreamHeader({.stream = 1, .end = true}, kChannel, 0);
  EXPECT_THAT(WireTrip(end, {}), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("carries no streams")));
}

TEST(StreamPacket, EveryShapeOutsideTheRulesIsRefusedByName) {
  struct Case {
    const char* name;
    PacketHeader header;
    const char* says;
  };
  const PacketHeader data =
      StreamHeader({.stream = 1, .offset = 4096, .bytes = 100}, kChannel, 0);
  const PacketHeader end =
      StreamHeader({.stream = 1, .offset = 4096, .end = true}, kChannel, 0);
  auto with = [](PacketHeader h, auto change) {
    change(h);
    return h;
  };
  const Case cases[] = {
      {"pages", with(data, [](PacketHeader& h) { h.page_count = 1; }),
       "STREAM packet carries page_count 1"},
      {"compressed",
       with(data, [](PacketHeader& h) { h.compressed_bytes = 10; }),
       "compressed_bytes 10; want 0"},
      {"stream id", with(data, [](PacketHeader& h) { h.region_id = 256; }),
       "names stream 256; streams are numbered below 256"},
      {"empty", with(data, [](PacketHeader& h) { h.page_size = 0; }),
       "carries 0 payload bytes; want 1 to 1048576"},
      {"too long",
       with(data,
            [](PacketHeader& h) { h.page_size = kMaxStreamPayloadBytes + 1; }),
       "carries 1048577 payload bytes"},
      {"end with bytes", with(end, [](PacketHeader& h) { h.page_size = 1; }),
       "STREAM_END packet carries 1 payload bytes; want 0"},
      {"offset wraps",
       with(data, [](PacketHeader& h) { h.round = ~uint64_t{0} - 10; }),
       "a stream ends below"},
      {"end past the bound",
       with(end, [](PacketHeader& h) { h.round = kMaxStreamOffset + 1; }),
       "STREAM_END packet at stream offset"},
      {"both flags",
       with(
           data,
           [](PacketHeader& h) { h.flags = kPacketStream | kPacketStreamEnd; }),
       "not a valid combination"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(WireTrip(c.header),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.says)))
        << c.name;
  }
  // The bounds themselves are taken.
  EXPECT_OK(WireTrip(with(data, [](PacketHeader& h) {
    h.round = kMaxStreamOffset - h.page_size;
  })));
  EXPECT_OK(
      WireTrip(with(end, [](PacketHeader& h) { h.round = kMaxStreamOffset; })));
}

// Nothing follows a stream packet's fixed part but its payload: a next
// header it announces is held to the same bound as any packet's.
TEST(StreamPacket, ItsNextHeaderAnnouncementMeetsTheUsualBound) {
  PacketHeader h =
      StreamHeader({.stream = 0, .offset = 0, .bytes = 8}, kChannel, 0);
  h.next_header_bytes = static_cast<uint32_t>(PacketHeaderBytes(kMaxPages + 1));
  EXPECT_THAT(WireTrip(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("announces a next header")));
}

}  // namespace
}  // namespace ramferry::proto
