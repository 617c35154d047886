// The stream session's control messages (proto/stream_control.h): each
// round-trips through its frame, and each decoder refuses what a broken or
// forging peer could send, with the field named.
#include "proto/stream_control.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/control.h"
#include "proto/stream.h"
#include "proto/wire.h"
#include "tests/support/status_matchers.h"

namespace ramferry::proto {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// The payload of a whole frame, after its header checked out.
std::vector<uint8_t> Payload(const std::vector<uint8_t>& frame,
                             ControlType type) {
  absl::StatusOr<FrameHeader> h = DecodeFrameHeader(frame);
  EXPECT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->type, type);
  EXPECT_EQ(h->length, frame.size() - kFrameHeaderBytes);
  return {frame.begin() + kFrameHeaderBytes, frame.end()};
}

TEST(StreamControl, EachMessageRoundTrips) {
  EXPECT_EQ(
      *DecodeStreamId(Payload(EncodeStreamOpen(255), ControlType::kStreamOpen)),
      255u);
  EXPECT_EQ(*DecodeStreamId(
                Payload(EncodeStreamOpened(3), ControlType::kStreamOpened)),
            3u);
  const std::vector<uint8_t> bytes(kMaxStreamBackBytes, 0xab);
  const std::vector<uint8_t> back =
      Payload(EncodeStreamBack(7, 1234, bytes), ControlType::kStreamBack);
  absl::StatusOr<StreamBack> b = DecodeStreamBack(back);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->stream, 7u);
  EXPECT_EQ(b->offset, 1234u);
  EXPECT_THAT(b->bytes, ElementsAreArray(bytes));
  const StreamAck ack{.stream = 4, .offset = 5u << 20, .end = true};
  EXPECT_EQ(
      *DecodeStreamAck(Payload(EncodeStreamAck(ack), ControlType::kStreamAck)),
      ack);
  const StreamBackEnd end{.stream = 9, .length = 1u << 20};
  EXPECT_EQ(*DecodeStreamBackEnd(
                Payload(EncodeStreamBackEnd(end), ControlType::kStreamBackEnd)),
            end);
}

TEST(StreamControl, DecodersRefuseWhatNoPeerSends) {
  EXPECT_THAT(DecodeStreamId(Payload(EncodeStreamOpen(kMaxStreams),
                                     ControlType::kStreamOpen)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("numbered below 256")));
  EXPECT_THAT(
      DecodeStreamId(std::vector<uint8_t>(5)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("want 4")));
  // No bytes, a stream past the bound, an offset past 2^62.
  EXPECT_THAT(DecodeStreamBack(std::vector<uint8_t>(12)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("1 to 65536 bytes")));
  EXPECT_THAT(
      DecodeStreamBack(
          Payload(EncodeStreamBack(256, 0, {{1}}), ControlType::kStreamBack)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stream 256")));
  EXPECT_THAT(
      DecodeStreamBack(Payload(EncodeStreamBack(0, kMaxStreamOffset, {{1}}),
                               ControlType::kStreamBack)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("past 2^62")));
  EXPECT_THAT(
      DecodeStreamBackEnd(std::vector<uint8_t>(11)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("want 12")));
  std::vector<uint8_t> ack =
      Payload(EncodeStreamAck({.stream = 1}), ControlType::kStreamAck);
  ack[15] = 2;  // an unknown flag
  EXPECT_THAT(DecodeStreamAck(ack), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("flags 0 or 1")));
  // A frame header that claims more than a STREAM_BACK may hold is refused
  // before its payload is read.
  std::vector<uint8_t> header(kFrameHeaderBytes);
  Store32(header.data(), static_cast<uint32_t>(ControlType::kStreamBack));
  Store32(header.data() + 4, 12 + kMaxStreamBackBytes + 1);
  EXPECT_THAT(DecodeFrameHeader(header),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("exceeds its bound")));
}

}  // namespace
}  // namespace ramferry::proto
