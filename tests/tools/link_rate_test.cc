#include "tools/migrate/link_rate.h"

#include "gtest/gtest.h"

namespace ramferry::migrate {
namespace {

TEST(LinkRate, UnmeasuredLinkGivesNoEstimate) {
  LinkRate link;
  EXPECT_EQ(link.SecondsFor(1, 4096), std::nullopt);
  link.AddRound(0, 0.5);  // a round that moved nothing says nothing
  EXPECT_EQ(link.SecondsFor(1, 4096), std::nullopt);
  link.AddRound(1 << 20, 0);  // nor does one timed at zero
  EXPECT_EQ(link.SecondsFor(1, 4096), std::nullopt);
}

TEST(LinkRate, NothingPendingTakesNoTime) {
  LinkRate link;
  EXPECT_EQ(link.SecondsFor(0, 4096), 0.0);
}

TEST(LinkRate, SmallRoundsTogetherMeasureTheLinkOfASmallRegion) {
  LinkRate link;
  link.AddRound(4 << 20, 1.0);
  link.AddRound(2 << 20, 1.0);
  EXPECT_DOUBLE_EQ(link.BytesPerSecond(), (6 << 20) / 2.0);
  EXPECT_DOUBLE_EQ(*link.SecondsFor(768, 4096), 1.0);
}

TEST(LinkRate, TheFastestLargeRoundIsTheLink) {
  LinkRate link;
  link.AddRound(1 << 20, 0.001);  // small: dominated by luck or the RTT
  link.AddRound(32u << 20, 2.0);
  link.AddRound(64u << 20, 2.0);
  link.AddRound(16u << 20, 4.0);
  EXPECT_DOUBLE_EQ(link.BytesPerSecond(), (64u << 20) / 2.0);
}

TEST(LinkRate, TheRoundTripIsWhatTheShortestRoundTookBeyondItsBytes) {
  LinkRate link;
  EXPECT_EQ(link.RoundTripSeconds(), 0);
  link.AddRound(64u << 20, 2.0);  // the link: 32 MiB/s
  link.AddRound(32u << 20, 2.5);  // 1.5 s beyond its bytes (a slow round)
  link.AddRound(1u << 20, 0.05);  // 1/32 s of bytes + 18.75 ms
  EXPECT_DOUBLE_EQ(link.RoundTripSeconds(), 0.05 - 1.0 / 32);
  // Faster than the link: the rate it went is the fastest, and the
  // shortest round's bytes at it leave no fixed cost.
  link.AddRound(1u << 20, 0.001);
  EXPECT_EQ(link.RoundTripSeconds(), 0);
}

TEST(LinkRate, AnEmptyRoundIsAllRoundTrip) {
  // Round 0 slower than later rounds (its first touches): the round
  // trip is still the empty round's time, not hidden by the slow rate.
  LinkRate link;
  link.AddRound(64u << 20, 2.0);
  link.AddRound(8u << 20, 0.05);
  link.AddRound(0, 0.002);
  EXPECT_DOUBLE_EQ(link.RoundTripSeconds(), 0.002);
}

}  // namespace
}  // namespace ramferry::migrate
