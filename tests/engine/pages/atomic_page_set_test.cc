// AtomicPageSet: bit semantics at word edges and the set's end, the
// callbacks of ClearRange, and one winner per page under contention.
#include "engine/pages/atomic_page_set.h"

#include <atomic>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ramferry::engine {
namespace {

using ::testing::ElementsAre;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

TEST(AtomicPageSetTest, TestAndSetAndClearSayWhoChangedTheBit) {
  AtomicPageSet s(130);
  EXPECT_TRUE(s.TestAndSet(129));
  EXPECT_FALSE(s.TestAndSet(129));
  EXPECT_TRUE(s.Test(129));
  EXPECT_TRUE(s.TestAndClear(129));
  EXPECT_FALSE(s.TestAndClear(129));
  EXPECT_FALSE(s.Test(129));
  // Past the end: never set, never reported.
  EXPECT_FALSE(s.TestAndSet(130));
  EXPECT_FALSE(s.Test(130));
  EXPECT_EQ(s.Count(), 0u);
}

TEST(AtomicPageSetTest, RangesClipAndCount) {
  AtomicPageSet s(130);
  EXPECT_EQ(s.SetRange(60, 10), 10u);
  EXPECT_EQ(s.SetRange(0, 64), 60u);  // 60..63 were set
  EXPECT_EQ(s.SetRange(120, kMax), 10u);
  EXPECT_EQ(s.SetRange(kMax, 3), 0u);
  EXPECT_EQ(s.Count(), 80u);
  std::vector<uint64_t> cleared;
  EXPECT_EQ(s.ClearRange(62, 6, [&](uint64_t p) { cleared.push_back(p); }), 6u);
  EXPECT_THAT(cleared, ElementsAre(62, 63, 64, 65, 66, 67));
  EXPECT_EQ(s.ClearRange(62, 6), 0u);
  EXPECT_EQ(s.ClearRange(0, kMax), 74u);
  EXPECT_EQ(s.Count(), 0u);
}

TEST(AtomicPageSetTest, NextSetAndNextClearStopAtTheBound) {
  AtomicPageSet s(200);
  s.SetRange(70, 60);  // [70, 130)
  EXPECT_EQ(s.NextSet(0, 200), 70u);
  EXPECT_EQ(s.NextSet(0, 50), 50u);
  EXPECT_EQ(s.NextSet(100, 200), 100u);
  EXPECT_EQ(s.NextClear(70, 200), 130u);
  EXPECT_EQ(s.NextClear(70, 100), 100u);
  EXPECT_EQ(s.NextClear(0, 200), 0u);
  EXPECT_EQ(s.NextSet(130, 200), 200u);
  EXPECT_EQ(s.NextSet(0, kMax), 70u);
  EXPECT_EQ(s.NextClear(130, kMax), 130u);
  EXPECT_TRUE(s.AnySet(0, 71));
  EXPECT_FALSE(s.AnySet(0, 70));
  EXPECT_FALSE(s.AnySet(130, kMax));
  EXPECT_FALSE(s.AnySet(500, 1));
  std::vector<uint64_t> all;
  s.ForEachSet([&](uint64_t p) { all.push_back(p); });
  EXPECT_EQ(all.size(), 60u);
  EXPECT_EQ(all.front(), 70u);
  EXPECT_EQ(all.back(), 129u);
}

TEST(AtomicPageSetTest, OneWinnerPerPageUnderContention) {
  constexpr uint64_t kPages = 4096;
  AtomicPageSet s(kPages);
  std::atomic<uint64_t> wins{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      uint64_t mine = 0;
      for (uint64_t p = 0; p < kPages; ++p) mine += s.TestAndSet(p) ? 1 : 0;
      wins.fetch_add(mine);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wins.load(), kPages);
  threads.clear();
  std::atomic<uint64_t> cleared{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] { cleared.fetch_add(s.ClearRange(0, kPages)); });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(cleared.load(), kPages);
}

}  // namespace
}  // namespace ramferry::engine
