// The post-copy missing set on the wire: layout, round trips through the
// splitter, and every way a hostile or broken source could get a set past
// the decoder (truncation, bad counts, ranges out of the region, wrapping
// ends, overlaps, messages out of order) being refused.
#include "proto/postcopy.h"

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/wire.h"

namespace ramferry::proto {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// Region 7: 100 pages of 4 KiB; region 9: 8 pages of 512 bytes.
std::vector<RegionInfo> Table() {
  return {{7, 4096, 100 * 4096, "ram"}, {9, 512, 8 * 512, "small"}};
}

std::vector<uint8_t> Encode(const MissingPages& m) {
  std::vector<uint8_t> out;
  EncodeMissingPages(m, &out);
  return out;
}

// A payload with raw fields, for what no encoder makes.
std::vector<uint8_t> Raw(uint32_t region, uint32_t flags, uint32_t count,
                         std::vector<uint64_t> words) {
  std::vector<uint8_t> out;
  WireWriter w(&out);
  w.U32(region);
  w.U32(flags);
  w.U32(count);
  for (uint64_t x : words) w.U64(x);
  return out;
}

absl::Status DecodeStatus(const std::vector<uint8_t>& payload) {
  return DecodeMissingPages(payload, Table()).status();
}

void ExpectRefused(const std::vector<uint8_t>& payload,
                   const std::string& words) {
  absl::Status s = DecodeStatus(payload);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(words));
}

TEST(MissingPagesTest, LayoutIsBigEndianWithExplicitSizes) {
  MissingPages m{7, true, {{1, 2}, {10, 90}}};
  std::vector<uint8_t> b = Encode(m);
  ASSERT_EQ(b.size(), kMissingPagesFixedBytes + 2 * kMissingRangeBytes);
  EXPECT_EQ(Load32(b.data()), 7u);
  EXPECT_EQ(Load32(b.data() + 4), kMissingPagesLast);
  EXPECT_EQ(Load32(b.data() + 8), 2u);
  EXPECT_EQ(Load64(b.data() + 12), 1u);
  EXPECT_EQ(Load64(b.data() + 20), 2u);
  EXPECT_EQ(Load64(b.data() + 28), 10u);
  EXPECT_EQ(Load64(b.data() + 36), 90u);
  // The encoder appends: a frame builder's header stays in front.
  std::vector<uint8_t> framed = {0xAB};
  EncodeMissingPages(m, &framed);
  EXPECT_EQ(framed.size(), b.size() + 1);
  EXPECT_EQ(framed[0], 0xAB);
}

TEST(MissingPagesTest, RoundTripsWholeRegionAndEdges) {
  for (const MissingPages& m :
       {MissingPages{7, true, {{0, 100}}},
        MissingPages{7, true, {{0, 1}, {99, 1}}},
        MissingPages{9, false, {{0, 1}, {2, 1}, {4, 4}}},
        MissingPages{9, true, {}}}) {
    absl::StatusOr<MissingPages> d = DecodeMissingPages(Encode(m), Table());
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, m);
  }
}

TEST(MissingPagesTest, SplitsIntoOrderedMessagesTheCheckerAccepts) {
  std::vector<PageRange> set = {{0, 3}, {5, 1}, {7, 2}, {20, 10}, {50, 50}};
  std::vector<MissingPages> msgs = SplitMissingPages(7, set, 2);
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_FALSE(msgs[0].last);
  EXPECT_FALSE(msgs[1].last);
  EXPECT_TRUE(msgs[2].last);
  EXPECT_THAT(msgs[2].ranges, ElementsAre(PageRange{50, 50}));

  MissingPagesChecker checker(Table());
  std::vector<PageRange> back;
  for (const MissingPages& m : msgs) {
    absl::StatusOr<MissingPages> d = DecodeMissingPages(Encode(m), Table());
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_TRUE(checker.Accept(*d).ok());
    back.insert(back.end(), d->ranges.begin(), d->ranges.end());
  }
  EXPECT_EQ(back, set);
  EXPECT_EQ(checker.missing_pages(), 3u + 1 + 2 + 10 + 50);
  EXPECT_FALSE(checker.complete()) << "region 9 has not been sent";
  for (const MissingPages& m : SplitMissingPages(9, {})) {
    ASSERT_TRUE(checker.Accept(m).ok());
  }
  EXPECT_TRUE(checker.complete());
}

TEST(MissingPagesTest, EmptySetIsOneEmptyLastMessage) {
  std::vector<MissingPages> msgs = SplitMissingPages(7, {});
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_TRUE(msgs[0].last);
  EXPECT_TRUE(msgs[0].ranges.empty());
  EXPECT_EQ(Encode(msgs[0]).size(), kMissingPagesFixedBytes);
}

TEST(MissingPagesTest, SplitOfAnExactMultipleEndsWithAFullLastMessage) {
  std::vector<PageRange> set = {{0, 1}, {2, 1}, {4, 1}, {6, 1}};
  std::vector<MissingPages> msgs = SplitMissingPages(7, set, 2);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_TRUE(msgs[1].last);
  EXPECT_EQ(msgs[1].ranges.size(), 2u);
}

TEST(MissingPagesTest, LargestMessageFitsItsBound) {
  std::vector<PageRange> set;
  for (uint64_t i = 0; i < kMaxMissingRanges + 1; ++i)
    set.push_back({2 * i, 1});
  std::vector<RegionInfo> table = {
      {1, 4096, 4096 * 2 * (uint64_t{kMaxMissingRanges} + 1), "big"}};
  std::vector<MissingPages> msgs = SplitMissingPages(1, set);
  ASSERT_EQ(msgs.size(), 2u);
  std::vector<uint8_t> first = Encode(msgs[0]);
  EXPECT_EQ(first.size(), kMaxMissingPagesPayload);
  absl::StatusOr<MissingPages> d = DecodeMissingPages(first, table);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->ranges.size(), kMaxMissingRanges);
}

// ---- adversarial decode ----

TEST(MissingPagesDecodeTest, RefusesEveryTruncation) {
  std::vector<uint8_t> good = Encode({7, true, {{1, 2}, {10, 5}}});
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + n);
    absl::Status s = DecodeStatus(cut);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
  }
  ExpectRefused({good.begin(), good.begin() + 11}, "fixed part");
  ExpectRefused({good.begin(), good.end() - 1}, "carries 31 bytes");
}

TEST(MissingPagesDecodeTest, RefusesTrailingBytes) {
  std::vector<uint8_t> b = Encode({7, true, {{1, 2}}});
  b.push_back(0);
  ExpectRefused(b, "carries 17 bytes");
}

TEST(MissingPagesDecodeTest, HugeCountIsRefusedBeforeAllocating) {
  // 4 billion ranges announced in a 12-byte payload: refused by the
  // bound, not by running out of memory.
  ExpectRefused(Raw(7, 1, 0xFFFFFFFFu, {}), "at most 32768");
  ExpectRefused(Raw(7, 1, kMaxMissingRanges + 1, {}), "at most 32768");
  // Within the bound, but not backed by the payload.
  ExpectRefused(Raw(7, 1, kMaxMissingRanges, {1, 1}), "announces 32768");
}

TEST(MissingPagesDecodeTest, RefusesUnknownFlagsAndRegions) {
  ExpectRefused(Raw(7, 2, 1, {0, 1}), "unknown flags 0x2");
  ExpectRefused(Raw(7, 0x80000001u, 1, {0, 1}), "unknown flags");
  ExpectRefused(Raw(8, 1, 1, {0, 1}), "region 8");
  ExpectRefused(Raw(8, 1, 1, {0, 1}), "not in the session's region table");
}

TEST(MissingPagesDecodeTest, RefusesAnEmptyMessageThatIsNotLast) {
  ExpectRefused(Raw(7, 0, 0, {}), "only the last message");
  EXPECT_TRUE(DecodeStatus(Raw(7, 1, 0, {})).ok());
}

TEST(MissingPagesDecodeTest, RefusesEmptyRanges) {
  ExpectRefused(Raw(7, 1, 1, {5, 0}), "is empty");
}

TEST(MissingPagesDecodeTest, RefusesRangesOutsideTheRegion) {
  ExpectRefused(Raw(7, 1, 1, {100, 1}), "runs past the region's 100 pages");
  ExpectRefused(Raw(7, 1, 1, {99, 2}), "runs past");
  ExpectRefused(Raw(7, 1, 1, {0, 101}), "runs past");
  ExpectRefused(Raw(9, 1, 1, {7, 2}), "8 pages");
  ExpectRefused(Raw(7, 1, 1, {kMax, 1}), "runs past");
}

TEST(MissingPagesDecodeTest, RefusesRangesWhoseEndWraps) {
  // first + count wraps to a small number: must not pass as "inside".
  ExpectRefused(Raw(7, 1, 1, {50, kMax - 10}), "runs past");
  ExpectRefused(Raw(7, 1, 1, {1, kMax}), "runs past");
  ExpectRefused(Raw(7, 1, 2, {0, 1, 2, kMax - 1}), "range 1");
}

TEST(MissingPagesDecodeTest, RefusesOverlapsDescentAndAdjacency) {
  ExpectRefused(Raw(7, 1, 2, {10, 5, 12, 1}), "ascending, disjoint");
  ExpectRefused(Raw(7, 1, 2, {10, 5, 10, 5}), "ascending, disjoint");
  ExpectRefused(Raw(7, 1, 2, {20, 1, 10, 1}), "before page 22");
  ExpectRefused(Raw(7, 1, 2, {10, 5, 15, 1}), "not adjacent");
  EXPECT_TRUE(DecodeStatus(Raw(7, 1, 2, {10, 5, 16, 1})).ok());
}

TEST(MissingPagesDecodeTest, RandomBytesNeverPassBadRanges) {
  // Whatever decodes must be canonical and inside its region; ASan
  // watches the reads.
  std::mt19937_64 rng(16);
  const std::vector<RegionInfo> table = Table();
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint64_t> words(rng() % 7);
    for (uint64_t& w : words) w = rng() % 3 == 0 ? rng() : rng() % 110;
    std::vector<uint8_t> b =
        Raw(rng() % 2 == 0 ? 7 : 9, static_cast<uint32_t>(rng() % 3),
            static_cast<uint32_t>(words.size() / 2 + rng() % 2 * (rng() % 3)),
            words);
    if (rng() % 8 == 0 && !b.empty()) b.resize(rng() % b.size());
    absl::StatusOr<MissingPages> d = DecodeMissingPages(b, table);
    if (!d.ok()) continue;
    const uint64_t pages = d->region_id == 7 ? 100 : 8;
    EXPECT_TRUE(ValidatePageRanges(d->ranges, pages, 0, "decoded").ok());
    EXPECT_EQ(Encode(*d), b);
  }
}

// ---- ValidatePageRanges ----

TEST(ValidatePageRangesTest, FromBoundsTheFirstRange) {
  std::vector<PageRange> r = {{5, 2}};
  EXPECT_TRUE(ValidatePageRanges(r, 10, 5, "x").ok());
  absl::Status s = ValidatePageRanges(r, 10, 6, "the set");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the set: range 0 starts at page 5"));
}

// ---- the checker ----

TEST(MissingPagesCheckerTest, RefusesAContinuationThatOverlapsOrTouches) {
  MissingPagesChecker c(Table());
  ASSERT_TRUE(c.Accept({7, false, {{10, 5}}}).ok());
  // Starts inside the previous message's last range.
  absl::Status s = c.Accept({7, false, {{12, 1}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("across messages"));
  // Adjacent to it: the encoder never splits a range, so this is not one.
  EXPECT_FALSE(c.Accept({7, false, {{15, 1}}}).ok());
  // The refusals changed nothing: the right continuation still fits.
  EXPECT_TRUE(c.Accept({7, true, {{16, 1}}}).ok());
  EXPECT_EQ(c.missing_pages(), 6u);
}

TEST(MissingPagesCheckerTest, RefusesAnythingAfterTheLastMessage) {
  MissingPagesChecker c(Table());
  ASSERT_TRUE(c.Accept({9, true, {{0, 1}}}).ok());
  absl::Status s = c.Accept({9, true, {}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("after its last one"));
  EXPECT_FALSE(c.Accept({9, false, {{5, 1}}}).ok());
}

TEST(MissingPagesCheckerTest, RefusesUnknownRegionsAndCompletesPerRegion) {
  MissingPagesChecker c(Table());
  EXPECT_FALSE(c.Accept({8, true, {}}).ok());
  EXPECT_FALSE(c.complete());
  ASSERT_TRUE(c.Accept({7, true, {}}).ok());
  EXPECT_FALSE(c.complete());
  ASSERT_TRUE(c.Accept({9, true, {}}).ok());
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(c.missing_pages(), 0u);
}

TEST(MissingPagesCheckerTest, EmptyTableIsCompleteAtOnce) {
  MissingPagesChecker c({});
  EXPECT_TRUE(c.complete());
}

}  // namespace
}  // namespace ramferry::proto
