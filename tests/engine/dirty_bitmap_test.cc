// DirtyBitmap: single-thread bit semantics at word edges and the bitmap's
// end, and concurrent setters racing a consumer that takes words.
#include "ramferry/dirty_bitmap.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ramferry {
namespace {

std::vector<uint64_t> SetPages(const DirtyBitmap& b) {
  std::vector<uint64_t> out;
  for (uint64_t p = 0; p < b.pages(); ++p) {
    if (b.Test(p)) out.push_back(p);
  }
  return out;
}

std::vector<uint64_t> Range(uint64_t first, uint64_t end) {
  std::vector<uint64_t> v;
  for (uint64_t p = first; p < end; ++p) v.push_back(p);
  return v;
}

TEST(DirtyBitmapTest, Shape) {
  EXPECT_EQ(DirtyBitmap(0).words(), 0u);
  EXPECT_EQ(DirtyBitmap(1).words(), 1u);
  EXPECT_EQ(DirtyBitmap(64).words(), 1u);
  EXPECT_EQ(DirtyBitmap(65).words(), 2u);
  EXPECT_EQ(DirtyBitmap(130).words(), 3u);
  DirtyBitmap b(130);
  EXPECT_EQ(b.pages(), 130u);
  EXPECT_EQ(b.Count(), 0u);
  for (size_t w = 0; w < b.words(); ++w) EXPECT_EQ(b.PeekWord(w), 0u);
}

TEST(DirtyBitmapTest, SetAndTestAtWordEdges) {
  DirtyBitmap b(130);
  for (uint64_t p : {0, 1, 63, 64, 127, 128, 129}) b.Set(p);
  EXPECT_EQ(SetPages(b), (std::vector<uint64_t>{0, 1, 63, 64, 127, 128, 129}));
  EXPECT_EQ(b.Count(), 7u);
  EXPECT_EQ(b.PeekWord(0), (uint64_t{1} << 63) | 3);
  EXPECT_EQ(b.PeekWord(1), (uint64_t{1} << 63) | 1);
  EXPECT_EQ(b.PeekWord(2), 3u);
  // Setting twice is idempotent.
  b.Set(64);
  EXPECT_EQ(b.Count(), 7u);
  b.ClearAll();
  EXPECT_EQ(b.Count(), 0u);
  EXPECT_TRUE(SetPages(b).empty());
}

TEST(DirtyBitmapTest, SetRangeInsideAndAcrossWords) {
  DirtyBitmap b(200);
  b.SetRange(60, 10);  // crosses the 64 boundary
  EXPECT_EQ(SetPages(b), Range(60, 70));
  b.ClearAll();
  b.SetRange(64, 64);  // exactly one word
  EXPECT_EQ(b.PeekWord(0), 0u);
  EXPECT_EQ(b.PeekWord(1), ~uint64_t{0});
  EXPECT_EQ(b.PeekWord(2), 0u);
  b.ClearAll();
  b.SetRange(3, 190);  // partial, full, partial words
  EXPECT_EQ(SetPages(b), Range(3, 193));
  EXPECT_EQ(b.Count(), 190u);
  b.ClearAll();
  b.SetRange(10, 0);  // empty
  EXPECT_EQ(b.Count(), 0u);
  b.SetRange(0, 1);
  b.SetRange(199, 1);
  EXPECT_EQ(SetPages(b), (std::vector<uint64_t>{0, 199}));
}

TEST(DirtyBitmapTest, SetRangePastTheEndIsClipped) {
  DirtyBitmap b(130);  // last word holds pages 128, 129
  b.SetRange(125, 100);
  EXPECT_EQ(SetPages(b), Range(125, 130));
  EXPECT_EQ(b.PeekWord(2), 3u) << "bits past pages() must stay clear";
  EXPECT_EQ(b.Count(), 5u);

  b.ClearAll();
  b.SetRange(130, 5);  // starts at the end
  b.SetRange(500, 5);  // starts past it
  EXPECT_EQ(b.Count(), 0u);
  for (size_t w = 0; w < b.words(); ++w) EXPECT_EQ(b.PeekWord(w), 0u);

  // A count so big that first + count would wrap around 2^64.
  b.SetRange(100, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(SetPages(b), Range(100, 130));
  EXPECT_EQ(b.PeekWord(2), 3u);
  b.ClearAll();
  b.SetRange(std::numeric_limits<uint64_t>::max() - 3, 10);
  EXPECT_EQ(b.Count(), 0u);
}

TEST(DirtyBitmapTest, SetAllOnOddSizes) {
  for (uint64_t pages : {1u, 63u, 64u, 65u, 127u, 128u, 1000u}) {
    DirtyBitmap b(pages);
    b.SetAll();
    EXPECT_EQ(b.Count(), pages) << pages;
    const uint64_t tail = pages % 64;
    const uint64_t last = b.PeekWord(b.words() - 1);
    EXPECT_EQ(last, tail == 0 ? ~uint64_t{0} : (uint64_t{1} << tail) - 1)
        << pages;
  }
  DirtyBitmap empty(0);
  empty.SetAll();
  EXPECT_EQ(empty.Count(), 0u);
}

TEST(DirtyBitmapTest, OrWordMasksBitsPastTheEnd) {
  DirtyBitmap b(70);
  b.OrWord(1, ~uint64_t{0});
  EXPECT_EQ(b.PeekWord(1), (uint64_t{1} << 6) - 1);
  EXPECT_EQ(b.Count(), 6u);
  b.OrWord(0, 0x8000000000000001ull);
  EXPECT_TRUE(b.Test(0));
  EXPECT_TRUE(b.Test(63));
  EXPECT_EQ(b.Count(), 8u);
  b.OrWord(0, 0);
  EXPECT_EQ(b.Count(), 8u);
}

TEST(DirtyBitmapTest, TakeWordReturnsAndClears) {
  DirtyBitmap b(130);
  b.SetRange(60, 10);
  b.Set(129);
  EXPECT_EQ(b.TakeWord(0), 0xFull << 60);
  EXPECT_EQ(b.PeekWord(0), 0u);
  EXPECT_EQ(b.Count(), 7u);
  EXPECT_EQ(b.TakeWord(0), 0u);
  EXPECT_EQ(b.TakeWord(1), 0x3Full);
  EXPECT_EQ(b.TakeWord(2), 2u);
  EXPECT_EQ(b.Count(), 0u);
  // Pages set after their word was taken are there for the next take.
  b.Set(1);
  EXPECT_EQ(b.TakeWord(0), 2u);
}

// Setters mark every page (each a disjoint share, in random order, some
// through SetRange) while a consumer keeps taking words. Every page must
// come out exactly once across the takes and the final sweep.
TEST(DirtyBitmapTest, ConcurrentSettersLoseNoBits) {
  constexpr uint64_t kPages = 1 << 15;
  constexpr int kSetters = 4;
  DirtyBitmap b(kPages);
  std::atomic<int> setters_done{0};
  std::vector<uint64_t> taken(b.words(), 0);
  uint64_t duplicates = 0;
  std::thread consumer([&] {
    // Sweeps until every setter finished, then one final sweep.
    bool last = false;
    while (true) {
      last = setters_done.load() == kSetters;
      for (size_t w = 0; w < b.words(); ++w) {
        uint64_t bits = b.TakeWord(w);
        duplicates += __builtin_popcountll(taken[w] & bits);
        taken[w] |= bits;
      }
      if (last) break;
    }
  });
  std::vector<std::thread> setters;
  for (int t = 0; t < kSetters; ++t) {
    setters.emplace_back([&, t] {
      std::vector<uint64_t> mine;
      // Interleaved ownership so setters share every word.
      for (uint64_t p = t; p < kPages; p += kSetters) mine.push_back(p);
      std::shuffle(mine.begin(), mine.end(), std::mt19937_64(t + 1));
      for (uint64_t p : mine) {
        if (p % 97 == 0) {
          b.SetRange(p, 1);
        } else {
          b.Set(p);
        }
      }
      setters_done.fetch_add(1);
    });
  }
  for (std::thread& s : setters) s.join();
  consumer.join();
  EXPECT_EQ(duplicates, 0u);
  uint64_t total = 0;
  for (size_t w = 0; w < taken.size(); ++w) {
    EXPECT_EQ(taken[w], ~uint64_t{0}) << "word " << w;
    total += __builtin_popcountll(taken[w]);
  }
  EXPECT_EQ(total, kPages);
  EXPECT_EQ(b.Count(), 0u);
}

// Re-dirtying: setters mark random pages repeatedly; each Set after a take
// must show up in a later take (a page is never lost, possibly sent twice).
TEST(DirtyBitmapTest, ConcurrentRedirtyIsNeverLost) {
  constexpr uint64_t kPages = 4096;
  DirtyBitmap b(kPages);
  std::atomic<bool> stop{false};
  std::vector<uint64_t> taken(b.words(), 0);
  std::thread consumer([&] {
    while (!stop.load()) {
      for (size_t w = 0; w < b.words(); ++w) taken[w] |= b.TakeWord(w);
    }
    for (size_t w = 0; w < b.words(); ++w) taken[w] |= b.TakeWord(w);
  });
  std::vector<uint64_t> expect(b.words(), 0);
  std::mt19937_64 rng(42);
  for (int i = 0; i < 50000; ++i) {
    uint64_t p = rng() % kPages;
    b.Set(p);
    expect[p / 64] |= uint64_t{1} << (p % 64);
  }
  stop = true;
  consumer.join();
  EXPECT_EQ(taken, expect);
}

// A page stored before its bit was set holds the new bytes when whoever
// takes the bit reads it: Set releases, TakeWord and TakeBits acquire.
// The page words are plain memory, so under ThreadSanitizer a relaxed Set
// is a data race report (and on ARM64 or POWER, old bytes sent); on x86
// both orders compile alike and this checks the values.
TEST(DirtyBitmapTest, AStoreBeforeSetIsSeenByWhoeverTakesTheBit) {
  constexpr uint64_t kPages = 64 * 64;
  DirtyBitmap b(kPages);
  std::vector<uint64_t> page(kPages, 0);  // one word stands for a page
  std::thread writer([&] {
    for (uint64_t p = 0; p < kPages; ++p) {
      page[p] = p + 1;
      if (p % 3 == 0) {
        b.Set(p);
      } else {
        b.OrWord(p / 64, uint64_t{1} << (p % 64));
      }
    }
  });
  uint64_t seen = 0;
  uint64_t wrong = 0;
  while (seen < kPages) {
    for (size_t w = 0; w < b.words(); ++w) {
      uint64_t bits = w % 2 == 0 ? b.TakeWord(w) : b.TakeBits(w, ~uint64_t{0});
      while (bits != 0) {
        const uint64_t p = w * 64 + std::countr_zero(bits);
        bits &= bits - 1;
        if (page[p] != p + 1) ++wrong;
        ++seen;
      }
    }
  }
  writer.join();
  EXPECT_EQ(wrong, 0u);
}

// A view reads and clears the caller's words in place: marks made in the
// words show up in the bitmap, takes clear them in the caller's memory,
// and bits past the last page are never taken.
TEST(DirtyBitmapTest, ViewWorksOnCallerWordsInPlace) {
  std::vector<uint64_t> words(3, 0);
  DirtyBitmap view = DirtyBitmap::View(words.data(), 130);
  EXPECT_EQ(view.words(), 3u);
  words[0] = 0x5;
  words[2] = ~uint64_t{0};  // only bits 0 and 1 are pages (128, 129)
  EXPECT_EQ(view.Count(), 4u);
  EXPECT_TRUE(view.Test(2));
  EXPECT_EQ(view.PeekWord(2), 3u);
  EXPECT_EQ(view.TakeWord(0), 0x5u);
  EXPECT_EQ(words[0], 0u);
  EXPECT_EQ(view.TakeBits(2, ~uint64_t{0}), 3u);
  view.Set(70);
  EXPECT_EQ(words[1], uint64_t{1} << 6);
  view.SetAll();
  EXPECT_EQ(words[0], ~uint64_t{0});
  view.ClearAll();
  EXPECT_EQ(words[0] | words[1], 0u);
}

}  // namespace
}  // namespace ramferry
