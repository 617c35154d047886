// StreamCursor: a stream's bytes delivered once each, in order, whatever
// a re-send after a lost channel overlaps; and every packet that does not
// fit what came refused.
#include "engine/stream/stream_cursor.h"

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::engine {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Stream bytes [offset, offset + n): byte i of the stream is i % 251.
std::vector<uint8_t> Bytes(uint64_t offset, uint32_t n) {
  std::vector<uint8_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = (offset + i) % 251;
  return v;
}

proto::StreamFrame Frame(uint64_t offset, uint32_t bytes) {
  return {.stream = 5, .offset = offset, .bytes = bytes};
}

TEST(StreamCursor, InOrderPacketsAreDeliveredWhole) {
  StreamCursor c(5);
  std::vector<uint8_t> got;
  for (uint64_t at = 0; at < 3000; at += 1000) {
    const std::vector<uint8_t> b = Bytes(at, 1000);
    absl::StatusOr<absl::Span<const uint8_t>> fresh =
        c.Take(Frame(at, 1000), b);
    ASSERT_OK(fresh);
    got.insert(got.end(), fresh->begin(), fresh->end());
  }
  EXPECT_THAT(got, ElementsAreArray(Bytes(0, 3000)));
  EXPECT_EQ(c.delivered(), 3000u);
  ASSERT_OK(c.Take({.stream = 5, .offset = 3000, .end = true}, {}));
  EXPECT_TRUE(c.ended());
}

// After a lost channel the source sends again from the last acknowledged
// offset: what overlaps is dropped, what is past it delivered, once.
TEST(StreamCursor, AResentPacketDeliversOnlyWhatIsNew) {
  StreamCursor c(5);
  const std::vector<uint8_t> first = Bytes(0, 1000);
  ASSERT_OK(c.Take(Frame(0, 1000), first));
  // Wholly seen: nothing.
  const std::vector<uint8_t> old = Bytes(200, 500);
  absl::StatusOr<absl::Span<const uint8_t>> none = c.Take(Frame(200, 500), old);
  ASSERT_OK(none);
  EXPECT_THAT(*none, IsEmpty());
  EXPECT_EQ(c.delivered(), 1000u);
  // Overlapping: the part past 1000 only.
  const std::vector<uint8_t> overlap = Bytes(600, 1000);
  absl::StatusOr<absl::Span<const uint8_t>> fresh =
      c.Take(Frame(600, 1000), overlap);
  ASSERT_OK(fresh);
  EXPECT_THAT(std::vector<uint8_t>(fresh->begin(), fresh->end()),
              ElementsAreArray(Bytes(1000, 600)));
  EXPECT_EQ(c.delivered(), 1600u);
}

TEST(StreamCursor, WhatDoesNotFitIsRefusedAndDeliversNothing) {
  StreamCursor c(5);
  const std::vector<uint8_t> b = Bytes(0, 100);
  ASSERT_OK(c.Take(Frame(0, 100), b));
  EXPECT_THAT(c.Take(Frame(101, 100), b),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("offset 101 leaves a gap after 100")));
  EXPECT_THAT(c.Take({.stream = 5, .offset = 99, .end = true}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("its end says 99 bytes, but 100 came")));
  EXPECT_THAT(c.Take({.stream = 6, .offset = 100, .bytes = 100}, b),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a packet of stream 6")));
  EXPECT_THAT(c.Take(Frame(100, 99), b),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("100 of its 99 bytes")));
  EXPECT_EQ(c.delivered(), 100u);
  ASSERT_OK(c.Take({.stream = 5, .offset = 100, .end = true}, {}));
  EXPECT_THAT(c.Take(Frame(100, 100), b),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("bytes past its end at 100")));
  EXPECT_THAT(c.Take({.stream = 5, .offset = 101, .end = true}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("its end says 101 bytes, but 100 came")));
}

// The end's acknowledgement may be lost with its channel: the source then
// sends the tail and the end again on another. Both were delivered, and
// are dropped, not refused.
TEST(StreamCursor, AResendAfterTheEndIsDroppedNotRefused) {
  StreamCursor c(5);
  const std::vector<uint8_t> b = Bytes(0, 100);
  ASSERT_OK(c.Take(Frame(0, 100), b));
  ASSERT_OK(c.Take({.stream = 5, .offset = 100, .end = true}, {}));
  const std::vector<uint8_t> tail = Bytes(40, 60);
  absl::StatusOr<absl::Span<const uint8_t>> again = c.Take(Frame(40, 60), tail);
  ASSERT_OK(again);
  EXPECT_THAT(*again, IsEmpty());
  ASSERT_OK(c.Take({.stream = 5, .offset = 100, .end = true}, {}));
  EXPECT_TRUE(c.ended());
  EXPECT_EQ(c.delivered(), 100u);
}

// Fresh changes nothing: a caller whose delivery failed part way
// advances by what it delivered, and the rest comes again.
TEST(StreamCursor, FreshChangesNothingUntilTheCallerAdvances) {
  StreamCursor c(5);
  const std::vector<uint8_t> b = Bytes(0, 100);
  absl::StatusOr<absl::Span<const uint8_t>> fresh = c.Fresh(Frame(0, 100), b);
  ASSERT_OK(fresh);
  EXPECT_EQ(fresh->size(), 100u);
  EXPECT_EQ(c.delivered(), 0u);
  c.Advance(30);
  fresh = c.Fresh(Frame(0, 100), b);
  ASSERT_OK(fresh);
  EXPECT_THAT(std::vector<uint8_t>(fresh->begin(), fresh->end()),
              ElementsAreArray(Bytes(30, 70)));
}

}  // namespace
}  // namespace ramferry::engine
