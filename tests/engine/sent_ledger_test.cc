// SentLedger: what each channel carried, per region, and a clear that costs
// what the round recorded rather than the size of the region.
#include "engine/sent_ledger.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "ramferry/region.h"

namespace ramferry::engine {
namespace {

// Regions the ledger only sizes its bitmaps by: nothing is mapped.
std::vector<Region> Regions(const std::vector<uint64_t>& pages) {
  std::vector<Region> out;
  for (uint64_t p : pages) {
    Region r;
    r.id = static_cast<uint32_t>(out.size());
    r.length = p * kPageSize;
    out.push_back(r);
  }
  return out;
}

std::vector<uint64_t> Offsets(std::vector<uint64_t> pages) {
  for (uint64_t& p : pages) p *= kPageSize;
  return pages;
}

TEST(SentLedgerTest, EachChannelKeepsWhatItCarriedPerRegion) {
  const std::vector<Region> regions = Regions({200, 70});
  SentLedger ledger(2, regions);
  ledger.Record(0, 0, Offsets({0, 63, 64, 199}));
  ledger.Record(0, 1, Offsets({69}));
  ledger.Record(1, 0, Offsets({5}));

  EXPECT_EQ(ledger.Of(0)[0]->Count(), 4u);
  EXPECT_TRUE(ledger.Of(0)[0]->Test(199));
  EXPECT_TRUE(ledger.Of(0)[1]->Test(69));
  EXPECT_EQ(ledger.Of(1)[0]->Count(), 1u);
  EXPECT_EQ(ledger.Of(1)[1]->Count(), 0u);

  ledger.Clear(0);
  EXPECT_EQ(ledger.Of(0)[0]->Count(), 0u);
  EXPECT_EQ(ledger.Of(0)[1]->Count(), 0u);
  EXPECT_TRUE(ledger.Of(1)[0]->Test(5)) << "another channel's share kept";
  ledger.ClearAll();
  EXPECT_EQ(ledger.Of(1)[0]->Count(), 0u);
}

TEST(SentLedgerTest, ClearVisitsTheWordsARoundSetNotTheRegion) {
  // 64 GiB of 4 KiB pages: 256 Ki words per channel, of which a round of
  // three pages touches two.
  const std::vector<Region> regions = Regions({uint64_t{16} << 20});
  SentLedger ledger(8, regions);
  ledger.Record(3, 0, Offsets({1, 2, (uint64_t{16} << 20) - 1}));
  EXPECT_EQ(ledger.touched_words(3), 2u);
  EXPECT_EQ(ledger.touched_words(0), 0u);
  ledger.ClearAll();
  EXPECT_EQ(ledger.touched_words(3), 0u);
  EXPECT_EQ(ledger.Of(3)[0]->Count(), 0u);
}

TEST(SentLedgerTest, AWordTakenAndSetAgainIsStillCleared) {
  // ScheduleRound takes the words of a lost channel's share; a page
  // recorded after that must be cleared like any other.
  const std::vector<Region> regions = Regions({128});
  SentLedger ledger(1, regions);
  ledger.Record(0, 0, Offsets({3}));
  EXPECT_NE(ledger.Of(0)[0]->TakeWord(0), 0u);
  ledger.Record(0, 0, Offsets({4}));
  ledger.Clear(0);
  EXPECT_EQ(ledger.Of(0)[0]->Count(), 0u);
  ledger.Record(0, 0, Offsets({100}));
  EXPECT_EQ(ledger.touched_words(0), 1u);
  EXPECT_TRUE(ledger.Of(0)[0]->Test(100));
}

}  // namespace
}  // namespace ramferry::engine
