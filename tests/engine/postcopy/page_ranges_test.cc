// Page sets as ranges: bitmaps to canonical ranges and back, the chunked
// scan agreeing with the whole one, and lookups at the edges.
#include "engine/postcopy/page_ranges.h"

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/postcopy.h"
#include "ramferry/dirty_bitmap.h"
#include "tests/support/status_matchers.h"

namespace ramferry::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// The runs of set bits, one page at a time: the reference.
std::vector<PageRange> Naive(const DirtyBitmap& b) {
  std::vector<PageRange> out;
  for (uint64_t p = 0; p < b.pages(); ++p) {
    if (!b.Test(p)) continue;
    if (!out.empty() && out.back().end() == p) {
      ++out.back().count;
    } else {
      out.push_back({p, 1});
    }
  }
  return out;
}

TEST(PageRangesTest, EmptyBitmapHasNoRanges) {
  DirtyBitmap b(200);
  EXPECT_THAT(RangesFromBitmap(b), IsEmpty());
  RangeScan s = ScanRanges(b, 0, 10);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.next_page, 200u);
  EXPECT_THAT(RangesFromBitmap(DirtyBitmap(0)), IsEmpty());
}

TEST(PageRangesTest, RunsAcrossWordEdgesAndToTheEnd) {
  DirtyBitmap b(300);
  b.Set(0);
  b.Set(63);
  b.Set(64);
  b.SetRange(100, 128);  // words 1 to 3
  b.Set(299);
  EXPECT_THAT(RangesFromBitmap(b),
              ElementsAre(PageRange{0, 1}, PageRange{63, 2},
                          PageRange{100, 128}, PageRange{299, 1}));
}

TEST(PageRangesTest, WholeBitmapIsOneRange) {
  for (uint64_t pages : {1u, 64u, 65u, 130u}) {
    DirtyBitmap b(pages);
    b.SetAll();
    EXPECT_THAT(RangesFromBitmap(b), ElementsAre(PageRange{0, pages})) << pages;
  }
}

TEST(PageRangesTest, ScanLeavesTheBitmapAsItWas) {
  DirtyBitmap b(100);
  b.SetRange(10, 5);
  RangesFromBitmap(b);
  EXPECT_EQ(b.Count(), 5u);
}

TEST(PageRangesTest, RandomBitmapsMatchTheReferenceInAnyChunking) {
  std::mt19937_64 rng(16);
  for (int round = 0; round < 300; ++round) {
    const uint64_t pages = rng() % 700;
    DirtyBitmap b(pages);
    // Runs of random lengths, so both short and multi-word runs occur.
    const int density = static_cast<int>(rng() % 4);
    for (uint64_t p = 0; p < pages;) {
      const uint64_t len = 1 + rng() % (density == 0 ? 3 : 150);
      if (rng() % 4 <= static_cast<uint64_t>(density)) b.SetRange(p, len);
      p += len + rng() % 5;
    }
    const std::vector<PageRange> want = Naive(b);
    ASSERT_EQ(RangesFromBitmap(b), want) << "pages " << pages;
    EXPECT_OK(proto::ValidatePageRanges(want, pages, 0, "scan"));

    const size_t chunk = 1 + rng() % 3;
    std::vector<PageRange> got;
    RangeScan s;
    do {
      s = ScanRanges(b, s.next_page, chunk);
      EXPECT_LE(s.ranges.size(), chunk);
      got.insert(got.end(), s.ranges.begin(), s.ranges.end());
    } while (!s.done);
    EXPECT_EQ(got, want) << "pages " << pages << " chunk " << chunk;
  }
}

TEST(PageRangesTest, MarkRangesIsTheInverse) {
  DirtyBitmap b(500);
  std::vector<PageRange> r = {{0, 3}, {64, 64}, {200, 1}, {450, 50}};
  MarkRanges(r, b);
  EXPECT_EQ(RangesFromBitmap(b), r);
  EXPECT_EQ(b.Count(), CountPages(r));
}

TEST(PageRangesTest, MarkRangesClipsWithoutWrapping) {
  DirtyBitmap b(100);
  const uint64_t kMax = std::numeric_limits<uint64_t>::max();
  MarkRanges({{{90, kMax}, {kMax, 5}, {100, 1}}}, b);
  EXPECT_THAT(RangesFromBitmap(b), ElementsAre(PageRange{90, 10}));
}

TEST(PageRangesTest, ContainsPageAtTheEdges) {
  std::vector<PageRange> r = {{5, 3}, {10, 1}, {64, 2}};
  std::vector<uint64_t> in;
  for (uint64_t p = 0; p < 80; ++p) {
    if (ContainsPage(r, p)) in.push_back(p);
  }
  EXPECT_THAT(in, ElementsAre(5, 6, 7, 10, 64, 65));
  EXPECT_FALSE(ContainsPage({}, 0));
  EXPECT_EQ(CountPages(r), 6u);
}

}  // namespace
}  // namespace ramferry::engine
