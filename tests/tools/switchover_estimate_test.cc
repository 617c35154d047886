// SwitchoverEstimate: each part of a switchover's downtime counted, on
// rounds of known sizes and times.
#include "tools/migrate/switchover_estimate.h"

#include "gtest/gtest.h"
#include "tools/migrate/link_rate.h"

namespace ramferry::migrate {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kRegionPages = 262144;  // 1 GiB

// A link of 400 MB/s that measured a 1 ms round trip on a small round.
LinkRate Link() {
  LinkRate link;
  link.AddRound(400'000'000, 1.0);
  link.AddRound(4'000'000, 0.011);
  return link;
}

TEST(SwitchoverEstimate, UnmeasuredLinkGivesNone) {
  LinkRate link;
  SwitchoverEstimate e(link, kRegionPages, kPage);
  EXPECT_EQ(e.Before(10, 0), std::nullopt);
  EXPECT_EQ(e.Paused(0.001, 10), std::nullopt);
  // Round 0 alone measured no re-sent pages: still none before the pause.
  link.AddRound(400'000'000, 1.0);
  EXPECT_EQ(e.Before(10, 0), std::nullopt);
  EXPECT_NE(e.Paused(0.001, 10), std::nullopt);
  link.AddRound(40'000, 0.001);
  EXPECT_NE(e.Before(10, 0), std::nullopt);
}

TEST(SwitchoverEstimate, NoneForAFinalRoundFarSmallerThanAnyMeasured) {
  const LinkRate link = Link();  // rounds of 400 MB and 4 MB
  SwitchoverEstimate e(link, kRegionPages, kPage);
  // 122 pages is 500 kB, 8x less than 4 MB: not yet.
  EXPECT_EQ(e.Before(122, 0), std::nullopt);
  EXPECT_NE(e.Before(123, 0), std::nullopt);
  // Once paused it is predicted all the same.
  EXPECT_NE(e.Paused(0.001, 1), std::nullopt);
}

TEST(SwitchoverEstimate, AnIdleWorkloadCostsTheCollectAndTheRound) {
  const LinkRate link = Link();
  SwitchoverEstimate e(link, kRegionPages, kPage);
  e.NoteCollect(0.002, 1000);
  // 1000 pages (4.1 MB): as the 4 MB round went, 11 ms per 4 MB.
  const double round = 1000 * kPage * 0.011 / 4'000'000;
  EXPECT_DOUBLE_EQ(*e.Before(1000, 0), 0.002 + round);
}

TEST(SwitchoverEstimate, AHotWorkloadDirtiesMoreUntilThePauseHolds) {
  const LinkRate link = Link();
  SwitchoverEstimate e(link, kRegionPages, kPage);
  e.NoteCollect(0.010, 1000);
  e.NotePause(0.030);
  // 40 ms of pause and collect at 100k pages/s: 4000 more pages, and the
  // collect grows with them (5000 pages: 50 ms).
  const double idle = *e.Before(1000, 0);
  const double hot = *e.Before(1000, 100'000);
  EXPECT_GT(hot, idle);
  const double expected = 0.030 + 0.050 + *link.RoundSeconds(5000 * kPage);
  EXPECT_DOUBLE_EQ(hot, expected);
}

TEST(SwitchoverEstimate, TheFinalRoundNeverExceedsTheRegion) {
  const LinkRate link = Link();
  SwitchoverEstimate e(link, 1000, kPage);
  e.NoteCollect(0.001, 1000);
  e.NotePause(1.0);
  EXPECT_DOUBLE_EQ(*e.Before(1000, 1e9),
                   1.0 + 0.001 + *link.RoundSeconds(1000 * kPage));
}

TEST(SwitchoverEstimate, OncePausedOnlyTheFinalRoundIsPredicted) {
  const LinkRate link = Link();
  SwitchoverEstimate e(link, kRegionPages, kPage);
  EXPECT_DOUBLE_EQ(*e.Paused(0.025, 2000),
                   0.025 + *link.RoundSeconds(2000 * kPage));
  EXPECT_DOUBLE_EQ(*e.Paused(0.025, 0), 0.025 + link.RoundTripSeconds());
}

TEST(SwitchoverEstimate, OnlyAFinalRoundOf4MiBOrMoreIsProbed) {
  const LinkRate link = Link();
  SwitchoverEstimate e(link, kRegionPages, kPage);
  const uint64_t from = SwitchoverEstimate::kProbeFromBytes / kPage;
  EXPECT_EQ(e.ProbePages(from - 1, 0.001, 0.300), 0u);
  EXPECT_EQ(e.ProbePages(from, 0.001, 0.300), from / 4);
  // Unmeasured (no estimate once paused): probed all the same.
  EXPECT_EQ(e.ProbePages(4 * from, std::nullopt, 0.300), from);
}

TEST(SwitchoverEstimate, AHopelessFinalRoundIsNotProbed) {
  const LinkRate link = Link();
  SwitchoverEstimate e(link, kRegionPages, kPage);
  const uint64_t pages = 100'000;
  // 3x the limit may still fit once measured; more than that is given
  // up on the estimate alone, as the probe would overrun the limit.
  EXPECT_EQ(e.ProbePages(pages, 0.060, 0.020), pages / 4);
  EXPECT_EQ(e.ProbePages(pages, 0.061, 0.020), 0u);
  // No limit (0): always probed.
  EXPECT_EQ(e.ProbePages(pages, 10.0, 0), pages / 4);
}

TEST(SwitchoverEstimate, TheRestGoesAtTheProbesRateItsRoundTripOnce) {
  const LinkRate link = Link();  // a 1 ms round trip
  ASSERT_DOUBLE_EQ(link.RoundTripSeconds(), 0.001);
  SwitchoverEstimate e(link, kRegionPages, kPage);
  // The probe: 1000 pages in 11 ms, of which 1 ms is the round trip; the
  // rest, 3000 pages, at 10 us each. 20 ms have passed since the pause.
  EXPECT_DOUBLE_EQ(e.AfterProbe(0.020, 1000, 0.011, 3000),
                   0.020 + 0.001 + 0.030);
  // A probe faster than the live rounds (a paused workload no longer
  // competes for CPU) predicts a faster rest, whatever the rounds said.
  EXPECT_LT(e.AfterProbe(0.020, 1000, 0.004, 3000), *e.Paused(0.020, 3000));
  // The round trip counts at most half of a short probe.
  EXPECT_DOUBLE_EQ(e.AfterProbe(0, 1000, 0.001, 1000), 0.0005 + 0.0005);
}

TEST(SwitchoverEstimate, TheLongestPauseMeasuredCounts) {
  const LinkRate link = Link();
  SwitchoverEstimate e(link, kRegionPages, kPage);
  EXPECT_EQ(e.pause_s(), 0);
  e.NotePause(0.050);
  e.NotePause(0.020);
  EXPECT_DOUBLE_EQ(e.pause_s(), 0.050);
}

TEST(LinkRateRoundSeconds, SmallRoundsGoAtTheRateOfTheNearestMeasured) {
  const LinkRate link = Link();
  // Near the large round: its rate and the round trip.
  EXPECT_DOUBLE_EQ(*link.RoundSeconds(200'000'000),
                   link.RoundTripSeconds() + 0.5);
  // Near the small one: its 11 ms per 4 MB, slower than the link's rate
  // and the round trip.
  EXPECT_DOUBLE_EQ(*link.RoundSeconds(8'000'000), 0.022);
  EXPECT_EQ(LinkRate().RoundSeconds(1), std::nullopt);
}

}  // namespace
}  // namespace ramferry::migrate
