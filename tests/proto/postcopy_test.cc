// The post-copy missing set on the wire: layout, round trips through the
// splitter, and every way a hostile or broken source could get a set past
// the decoder (truncation, bad counts, ranges out of the region, wrapping
// ends, overlaps, messages out of order) being refused.
#include "proto/postcopy.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/wire.h"
#include "tests/support/status_matchers.h"

namespace ramferry::proto {
namespace {

using ::ramferry::testing::StatusIs;

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
    ASSERT_OK(d);
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
    ASSERT_OK(d);
    ASSERT_OK(checker.Accept(*d));
    back.insert(back.end(), d->ranges.begin(), d->ranges.end());
  }
  EXPECT_EQ(back, set);
  EXPECT_EQ(checker.missing_pages(), 3u + 1 + 2 + 10 + 50);
  EXPECT_FALSE(checker.complete()) << "region 9 has not been sent";
  for (const MissingPages& m : SplitMissingPages(9, {})) {
    ASSERT_OK(checker.Accept(m));
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
  ASSERT_OK(d);
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
  EXPECT_OK(DecodeStatus(Raw(7, 1, 0, {})));
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
  EXPECT_OK(DecodeStatus(Raw(7, 1, 2, {10, 5, 16, 1})));
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
    EXPECT_OK(ValidatePageRanges(d->ranges, pages, 0, "decoded"));
    EXPECT_EQ(Encode(*d), b);
  }
}

// ---- ValidatePageRanges ----

TEST(ValidatePageRangesTest, FromBoundsTheFirstRange) {
  std::vector<PageRange> r = {{5, 2}};
  EXPECT_OK(ValidatePageRanges(r, 10, 5, "x"));
  absl::Status s = ValidatePageRanges(r, 10, 6, "the set");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the set: range 0 starts at page 5"));
}

// ---- the checker ----

TEST(MissingPagesCheckerTest, RefusesAContinuationThatOverlapsOrTouches) {
  MissingPagesChecker c(Table());
  ASSERT_OK(c.Accept({7, false, {{10, 5}}}));
  // Starts inside the previous message's last range.
  absl::Status s = c.Accept({7, false, {{12, 1}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("across messages"));
  // Adjacent to it: the encoder never splits a range, so this is not one.
  EXPECT_THAT(
      c.Accept({7, false, {{15, 1}}}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "ranges must ascend across messages too, with a gap between")));
  // The refusals changed nothing: the right continuation still fits.
  EXPECT_OK(c.Accept({7, true, {{16, 1}}}));
  EXPECT_EQ(c.missing_pages(), 6u);
}

TEST(MissingPagesCheckerTest, RefusesAnythingAfterTheLastMessage) {
  MissingPagesChecker c(Table());
  ASSERT_OK(c.Accept({9, true, {{0, 1}}}));
  absl::Status s = c.Accept({9, true, {}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("after its last one"));
  EXPECT_THAT(
      c.Accept({9, false, {{5, 1}}}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("each region's set ends with exactly one last message")));
}

TEST(MissingPagesCheckerTest, RefusesUnknownRegionsAndCompletesPerRegion) {
  MissingPagesChecker c(Table());
  EXPECT_THAT(
      c.Accept({8, true, {}}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "missing-pages message names region 8, which is not in the")));
  EXPECT_FALSE(c.complete());
  ASSERT_OK(c.Accept({7, true, {}}));
  EXPECT_FALSE(c.complete());
  ASSERT_OK(c.Accept({9, true, {}}));
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(c.missing_pages(), 0u);
}

TEST(MissingPagesCheckerTest, EmptyTableIsCompleteAtOnce) {
  MissingPagesChecker c({});
  EXPECT_TRUE(c.complete());
}

// ---- PAGE_REQUEST ----

// Region 1: 100 pages of 4 KiB; region 2: 2^28 pages of 4 KiB (ends near
// the top without wrapping); region 9: 8 pages of 512 bytes (not a
// post-copy region).
std::vector<RegionInfo> PostcopyTable() {
  return {{1, 4096, 100 * 4096, "ram"},
          {2, 4096, uint64_t{4096} << 28, "big"},
          {9, 512, 8 * 512, "small"}};
}

std::vector<uint8_t> PayloadOf(const std::vector<uint8_t>& frame,
                               ControlType type) {
  EXPECT_GE(frame.size(), kFrameHeaderBytes);
  absl::StatusOr<FrameHeader> h = DecodeFrameHeader(frame);
  EXPECT_OK(h);
  if (h.ok()) {
    EXPECT_EQ(h->type, type);
    EXPECT_EQ(h->length, frame.size() - kFrameHeaderBytes);
  }
  return {frame.begin() + kFrameHeaderBytes, frame.end()};
}

std::vector<uint8_t> RawRequest(uint32_t region, uint32_t count,
                                std::vector<uint64_t> pages) {
  std::vector<uint8_t> out;
  WireWriter w(&out);
  w.U32(region);
  w.U32(count);
  for (uint64_t p : pages) w.U64(p);
  return out;
}

absl::Status RequestStatus(const std::vector<uint8_t>& payload) {
  return DecodePageRequest(payload, PostcopyTable()).status();
}

TEST(PageRequestTest, LayoutAndRoundTrip) {
  PageRequest q{1, {0, 5, 99}};
  std::vector<uint8_t> b =
      PayloadOf(EncodePageRequest(q), ControlType::kPageRequest);
  ASSERT_EQ(b.size(), 8u + 3 * 8);
  EXPECT_EQ(Load32(b.data()), 1u);
  EXPECT_EQ(Load32(b.data() + 4), 3u);
  EXPECT_EQ(Load64(b.data() + 8), 0u);
  EXPECT_EQ(Load64(b.data() + 16), 5u);
  EXPECT_EQ(Load64(b.data() + 24), 99u);
  absl::StatusOr<PageRequest> d = DecodePageRequest(b, PostcopyTable());
  ASSERT_OK(d);
  EXPECT_EQ(*d, q);
}

TEST(PageRequestTest, BoundsOfTheCountAndTheRegion) {
  // The most pages one request carries, up to the region's last page.
  PageRequest most{2, {}};
  for (uint64_t i = 0; i < kMaxPageRequestPages; ++i) {
    most.pages.push_back((uint64_t{1} << 28) - kMaxPageRequestPages + i);
  }
  std::vector<uint8_t> b =
      PayloadOf(EncodePageRequest(most), ControlType::kPageRequest);
  EXPECT_EQ(b.size(), kMaxPageRequestPayload);
  absl::StatusOr<PageRequest> d = DecodePageRequest(b, PostcopyTable());
  ASSERT_OK(d);
  EXPECT_EQ(*d, most);
  // One more is refused, before anything is allocated for it.
  EXPECT_EQ(RequestStatus(RawRequest(2, kMaxPageRequestPages + 1, {0})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RequestStatus(RawRequest(2, 0xFFFFFFFFu, {})).code(),
            absl::StatusCode::kInvalidArgument);
  // None at all is not a request.
  EXPECT_THAT(
      RequestStatus(RawRequest(1, 0, {})),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("want 8 bytes and 1 to 4096 pages of 8 bytes each")));
  // The last page is inside; one past it and the top of u64 are not.
  EXPECT_OK(RequestStatus(RawRequest(1, 1, {99})));
  EXPECT_THAT(RequestStatus(RawRequest(1, 1, {100})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("pages must ascend, each once")));
  EXPECT_THAT(RequestStatus(RawRequest(1, 1, {kMax})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("pages must ascend, each once")));
  EXPECT_THAT(RequestStatus(RawRequest(2, 1, {uint64_t{1} << 28})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("pages must ascend, each once")));
}

TEST(PageRequestTest, RefusesBadSizesOrderAndRegions) {
  const std::vector<uint8_t> good = RawRequest(1, 2, {3, 4});
  ASSERT_OK(RequestStatus(good));
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_THAT(
        RequestStatus({good.begin(), good.begin() + static_cast<long>(n)}),
        StatusIs(
            absl::StatusCode::kInvalidArgument,
            HasSubstr(
                "bytes: want 8 bytes and 1 to 4096 pages of 8 bytes each")))
        << n;
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_THAT(
      RequestStatus(longer),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("want 8 bytes and 1 to 4096 pages of 8 bytes each")));
  EXPECT_THAT(
      RequestStatus(RawRequest(1, 2, {3})),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "want 8 bytes and 1 to 4096 pages of 8 bytes each")));  // count >
                                                                      // pages
  EXPECT_THAT(
      RequestStatus(RawRequest(1, 1, {3, 4})),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "want 8 bytes and 1 to 4096 pages of 8 bytes each")));  // count <
                                                                      // pages
  // Strictly ascending, each page once.
  absl::Status s = RequestStatus(RawRequest(1, 2, {4, 4}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ascend"));
  EXPECT_THAT(RequestStatus(RawRequest(1, 3, {1, 5, 2})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("pages must ascend, each once")));
  // Unknown region, and a region whose pages are not 4 KiB.
  s = RequestStatus(RawRequest(3, 1, {0}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("region 3"));
  EXPECT_THAT(
      RequestStatus(RawRequest(9, 1, {0})),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("page request names region 9, which is not a post-copy")));
  EXPECT_THAT(
      DecodePageRequest(good, {}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("page request names region 1, which is not a post-copy")));
}

// ---- PAGE_DATA ----

// Into `out` (cleared first; a caller that loops passes one buffer, so
// its memory is reused: a fresh 280 KiB each time cost a minute under
// TSan on a machine where every new page is slow to map).
void RawDataInto(std::vector<uint8_t>& out, uint32_t region, uint32_t flags,
                 uint64_t first, uint32_t count, uint32_t reserved,
                 size_t bytes) {
  out.clear();
  WireWriter w(&out);
  w.U32(region);
  w.U32(flags);
  w.U64(first);
  w.U32(count);
  w.U32(reserved);
  out.resize(out.size() + bytes, 0x5A);
}

std::vector<uint8_t> RawData(uint32_t region, uint32_t flags, uint64_t first,
                             uint32_t count, uint32_t reserved, size_t bytes) {
  std::vector<uint8_t> out;
  RawDataInto(out, region, flags, first, count, reserved, bytes);
  return out;
}

absl::Status DataStatus(const std::vector<uint8_t>& payload) {
  return DecodePageData(payload, PostcopyTable()).status();
}

TEST(PageDataTest, LayoutAndRoundTripOfBytes) {
  std::vector<uint8_t> pages(3 * 4096);
  for (size_t i = 0; i < pages.size(); ++i)
    pages[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> b =
      PayloadOf(EncodePageData(1, 97, 3, pages.data()), ControlType::kPageData);
  ASSERT_EQ(b.size(), kPageDataFixedBytes + pages.size());
  EXPECT_EQ(Load32(b.data()), 1u);
  EXPECT_EQ(Load32(b.data() + 4), 0u);
  EXPECT_EQ(Load64(b.data() + 8), 97u);
  EXPECT_EQ(Load32(b.data() + 16), 3u);
  EXPECT_EQ(Load32(b.data() + 20), 0u);
  absl::StatusOr<PageData> d = DecodePageData(b, PostcopyTable());
  ASSERT_OK(d);
  EXPECT_EQ(d->region_id, 1u);
  EXPECT_FALSE(d->zero);
  EXPECT_EQ(d->first_page, 97u);
  EXPECT_EQ(d->page_count, 3u);
  ASSERT_EQ(d->bytes.size(), pages.size());
  // The bytes are the payload's own, not a copy.
  EXPECT_EQ(d->bytes.data(), b.data() + kPageDataFixedBytes);
  EXPECT_TRUE(std::equal(pages.begin(), pages.end(), d->bytes.begin()));
}

TEST(PageDataTest, ZeroRunsCarryNoBytes) {
  std::vector<uint8_t> b =
      PayloadOf(EncodePageData(2, (uint64_t{1} << 28) - kMaxPageDataPages,
                               kMaxPageDataPages, nullptr),
                ControlType::kPageData);
  ASSERT_EQ(b.size(), kPageDataFixedBytes);
  EXPECT_EQ(Load32(b.data() + 4), kPageDataZero);
  absl::StatusOr<PageData> d = DecodePageData(b, PostcopyTable());
  ASSERT_OK(d);
  EXPECT_TRUE(d->zero);
  EXPECT_TRUE(d->bytes.empty());
  EXPECT_EQ(d->page_count, kMaxPageDataPages);
  // A zero run with bytes after it, and a plain run without them.
  EXPECT_THAT(
      DataStatus(RawData(1, kPageDataZero, 0, 1, 0, 4096)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "page data for region 1 carries 4096 bytes for 1 zero pages")));
  EXPECT_THAT(
      DataStatus(RawData(1, kPageDataZero, 0, 1, 0, 1)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(
                   "page data for region 1 carries 1 bytes for 1 zero pages")));
  EXPECT_THAT(
      DataStatus(RawData(1, 0, 0, 1, 0, 0)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("page data for region 1 carries 0 bytes for 1 pages")));
}

TEST(PageDataTest, BoundsOfTheRun) {
  EXPECT_OK(DataStatus(
      RawData(1, 0, 0, kMaxPageDataPages, 0, kMaxPageDataPages * 4096)));
  EXPECT_EQ(DecodePageData(RawData(1, 0, 0, kMaxPageDataPages, 0,
                                   kMaxPageDataPages * 4096),
                           PostcopyTable())
                ->bytes.size(),
            kMaxPageDataPayload - kPageDataFixedBytes);
  EXPECT_THAT(
      DataStatus(RawData(2, kPageDataZero, 0, kMaxPageDataPages + 1, 0, 0)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "pages [0, +65) are not 1 to 64 pages inside its 268435456")));
  EXPECT_THAT(
      DataStatus(RawData(1, kPageDataZero, 0, 0, 0, 0)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "pages [0, +0) are not 1 to 64 pages inside its 100 pages")));
  EXPECT_OK(DataStatus(RawData(1, kPageDataZero, 99, 1, 0, 0)));
  EXPECT_THAT(
      DataStatus(RawData(1, kPageDataZero, 99, 2, 0, 0)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "pages [99, +2) are not 1 to 64 pages inside its 100 pages")));
  EXPECT_THAT(
      DataStatus(RawData(1, kPageDataZero, 100, 1, 0, 0)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "pages [100, +1) are not 1 to 64 pages inside its 100 pages")));
  // first + count would wrap to a small number.
  EXPECT_THAT(
      DataStatus(RawData(2, kPageDataZero, kMax - 1, 4, 0, 0)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("pages [18446744073709551614, +4) are not 1 to 64 pages")));
  EXPECT_THAT(
      DataStatus(RawData(2, kPageDataZero, kMax, 1, 0, 0)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("pages [18446744073709551615, +1) are not 1 to 64 pages")));
}

TEST(PageDataTest, RefusesFlagsReservedSizesAndRegions) {
  absl::Status s = DataStatus(RawData(1, 2, 0, 1, 0, 4096));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("unknown flags 0x2"));
  EXPECT_THAT(
      DataStatus(RawData(1, 0x80000000u, 0, 1, 0, 4096)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "a truncated head, unknown flags 0x80000000 or a reserved")));
  s = DataStatus(RawData(1, 0, 0, 1, 1, 4096));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("reserved"));
  EXPECT_THAT(
      DataStatus(RawData(1, 0, 0, 1, 0x80000000u, 4096)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(
                   "a truncated head, unknown flags 0x0 or a reserved field")));
  EXPECT_THAT(
      DataStatus(RawData(1, 0, 0, 1, 0, 4095)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("page data for region 1 carries 4095 bytes for 1 pages")));
  EXPECT_THAT(
      DataStatus(RawData(1, 0, 0, 1, 0, 4097)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("page data for region 1 carries 4097 bytes for 1 pages")));
  EXPECT_THAT(
      DataStatus(RawData(1, 0, 0, 2, 0, 4096)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("page data for region 1 carries 4096 bytes for 2 pages")));
  const std::vector<uint8_t> head = RawData(1, kPageDataZero, 0, 1, 0, 0);
  for (size_t n = 0; n < head.size(); ++n) {
    EXPECT_THAT(DataStatus({head.begin(), head.begin() + static_cast<long>(n)}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("bytes: a truncated head, unknown flags")))
        << n;
  }
  s = DataStatus(RawData(3, kPageDataZero, 0, 1, 0, 0));
  EXPECT_THAT(std::string(s.message()), HasSubstr("region 3"));
  EXPECT_THAT(
      DataStatus(RawData(9, kPageDataZero, 0, 1, 0, 0)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "page data names region 9, which is not a post-copy region")));
  EXPECT_THAT(
      DecodePageData(head, {}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "page data names region 1, which is not a post-copy region")));
}

TEST(PageDataTest, RandomBytesNeverPassABadRun) {
  std::mt19937_64 rng(23);
  const std::vector<RegionInfo> table = PostcopyTable();
  std::vector<uint8_t> b;
  for (int i = 0; i < 20000; ++i) {
    const uint32_t region = std::vector<uint32_t>{1, 2, 3, 9}[rng() % 4];
    const uint32_t flags = static_cast<uint32_t>(rng() % 3);
    const uint64_t first = rng() % 3 == 0 ? rng() : rng() % 120;
    const uint32_t count = static_cast<uint32_t>(rng() % 70);
    const uint32_t reserved = rng() % 10 == 0 ? 1 : 0;
    size_t bytes = flags == 1 ? 0 : size_t{count} * 4096;
    if (rng() % 5 == 0) bytes = rng() % (70 * 4096);
    RawDataInto(b, region, flags, first, count, reserved, bytes);
    absl::StatusOr<PageData> d = DecodePageData(b, table);
    if (!d.ok()) continue;
    const uint64_t pages = region == 1 ? 100 : uint64_t{1} << 28;
    EXPECT_TRUE(region == 1 || region == 2);
    EXPECT_GE(d->page_count, 1u);
    EXPECT_LE(d->page_count, kMaxPageDataPages);
    EXPECT_LT(d->first_page, pages);
    EXPECT_LE(d->page_count, pages - d->first_page);
    EXPECT_EQ(d->bytes.size(), d->zero ? 0 : size_t{d->page_count} * 4096);
  }
}

}  // namespace
}  // namespace ramferry::proto
