// StreamBacklog: a stream's unacknowledged bytes kept, bounded, across
// the ring's wrap, and given back from any offset a resend starts at.
#include "engine/stream/stream_backlog.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::engine {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::vector<uint8_t> Bytes(uint64_t offset, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (offset + i) % 251;
  return v;
}

std::vector<uint8_t> Joined(const StreamBacklog& b, uint64_t from) {
  absl::StatusOr<std::array<absl::Span<const uint8_t>, 2>> parts =
      b.Since(from);
  EXPECT_OK(parts);
  std::vector<uint8_t> out;
  if (!parts.ok()) return out;
  for (absl::Span<const uint8_t> p : *parts)
    out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(StreamBacklog, KeepsWhatIsUnacknowledgedAcrossTheWrap) {
  StreamBacklog b(1000);
  // 2.5 rings' worth, acknowledged as it goes, so the ring wraps twice.
  uint64_t at = 0;
  while (at < 2500) {
    ASSERT_OK(b.Append(Bytes(at, 300)));
    at += 300;
    EXPECT_THAT(Joined(b, b.acked()),
                ElementsAreArray(Bytes(b.acked(), at - b.acked())));
    ASSERT_OK(b.Ack(at > 400 ? at - 400 : 0));
  }
  EXPECT_EQ(b.end(), at);
  // From any offset in the window: what a resend on another channel sends.
  for (uint64_t from = b.acked(); from <= b.end(); from += 37) {
    EXPECT_THAT(Joined(b, from), ElementsAreArray(Bytes(from, b.end() - from)))
        << from;
  }
}

TEST(StreamBacklog, IsBoundedAndRefusesWhatWouldPassIt) {
  StreamBacklog b(1000);
  ASSERT_OK(b.Append(Bytes(0, 900)));
  EXPECT_EQ(b.room(), 100u);
  EXPECT_THAT(b.Append(Bytes(900, 101)),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("101 bytes do not fit; 100 of 1000")));
  EXPECT_EQ(b.end(), 900u);  // nothing of a refused append is kept
  ASSERT_OK(b.Ack(500));
  EXPECT_EQ(b.room(), 600u);
  ASSERT_OK(b.Append(Bytes(900, 600)));
  EXPECT_EQ(b.room(), 0u);
  EXPECT_THAT(Joined(b, 500), ElementsAreArray(Bytes(500, 1000)));
}

TEST(StreamBacklog, AcksGoForwardOnlyAndNeverPastWhatWasSent) {
  StreamBacklog b(100);
  ASSERT_OK(b.Append(Bytes(0, 50)));
  ASSERT_OK(b.Ack(40));
  ASSERT_OK(b.Ack(10));  // an older acknowledgement changes nothing
  EXPECT_EQ(b.acked(), 40u);
  EXPECT_THAT(b.Ack(51),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("to offset 51, but only 50 bytes were sent")));
  EXPECT_THAT(b.Since(39), StatusIs(absl::StatusCode::kOutOfRange,
                                    HasSubstr("holds [40, 50), not from 39")));
  EXPECT_THAT(b.Since(51), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_TRUE(Joined(b, 50).empty());
}

// The reader fills the ring in place: a contiguous span inside the room,
// cut at the wrap, and a commit past either is refused.
TEST(StreamBacklog, ReadsGoStraightIntoTheRingUpToTheWrapAndTheRoom) {
  StreamBacklog b(100);
  absl::Span<uint8_t> w = b.Writable(1000);
  EXPECT_EQ(w.size(), 100u);
  const std::vector<uint8_t> first = Bytes(0, 70);
  std::copy(first.begin(), first.end(), w.begin());
  ASSERT_OK(b.Commit(70));
  EXPECT_EQ(b.Writable(1000).size(), 30u);  // the room left
  ASSERT_OK(b.Ack(60));
  w = b.Writable(1000);
  EXPECT_EQ(w.size(), 30u);  // up to the wrap, though 90 are free
  const std::vector<uint8_t> second = Bytes(70, 30);
  std::copy(second.begin(), second.end(), w.begin());
  ASSERT_OK(b.Commit(30));
  EXPECT_EQ(b.Writable(5).size(), 5u);  // past the wrap, at most asked
  EXPECT_THAT(b.Commit(61), StatusIs(absl::StatusCode::kOutOfRange,
                                     HasSubstr("60 are free")));
  EXPECT_THAT(Joined(b, 60), ElementsAreArray(Bytes(60, 40)));
}

}  // namespace
}  // namespace ramferry::engine
