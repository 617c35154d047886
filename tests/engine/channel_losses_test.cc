#include "engine/channel_losses.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::engine {
namespace {

using ::testing::HasSubstr;

TEST(ChannelLossesTest, ADeathReportedByBothEndsIsDeclaredOnce) {
  ChannelLosses l;
  l.SetChannels(3);
  EXPECT_FALSE(l.pending());
  l.Report(1, absl::UnavailableError("send failed"));
  l.Report(1, absl::UnavailableError("destination lost it"));
  l.Report(2, absl::UnavailableError("reset"));
  ASSERT_TRUE(l.pending());
  auto first = l.TakeNext();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->first, 1u);
  EXPECT_EQ(first->second.message(), "send failed");
  EXPECT_THAT(l.Declare(1, 4, first->second), HasSubstr("send failed"));
  // The second word about channel 1 is dropped on the way to channel 2.
  auto next = l.TakeNext();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->first, 2u);
  EXPECT_FALSE(l.TakeNext().has_value());
  EXPECT_FALSE(l.pending());
  EXPECT_TRUE(l.lost(1));
  EXPECT_FALSE(l.lost(2)) << "taken, not declared";
  EXPECT_EQ(l.live(), 2u);
}

TEST(ChannelLossesTest, TheAcknowledgedRoundIsTheOneReported) {
  ChannelLosses l;
  l.SetChannels(2);
  l.Declare(0, 5, absl::UnavailableError("gone"));
  EXPECT_FALSE(l.acknowledged(0).has_value());
  ASSERT_OK(l.Acknowledge(0, 6));
  EXPECT_EQ(l.acknowledged(0), 6u);
  l.Settle(0, 6);
  std::vector<ChannelLoss> r = l.reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].channel, 0u);
  EXPECT_EQ(r[0].round, 6u);
  EXPECT_EQ(r[0].reason, "gone");
}

TEST(ChannelLossesTest, AnAcknowledgementTwiceOrOutOfRangeIsRefused) {
  ChannelLosses l;
  l.SetChannels(2);
  ASSERT_OK(l.Acknowledge(1, 3));
  absl::Status twice = l.Acknowledge(1, 3);
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument) << twice;
  EXPECT_THAT(std::string(twice.message()),
              HasSubstr("unexpected CHANNEL_GONE_ACK for channel 1"));
  absl::Status outside = l.Acknowledge(2, 3);
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument) << outside;
  EXPECT_EQ(l.acknowledged(1), 3u);
}

TEST(ChannelLossesTest, DeathsAfterTheLastRoundAreRecordedAtTheEnd) {
  ChannelLosses l;
  l.SetChannels(3);
  l.Declare(0, 1, absl::UnavailableError("early"));
  l.Report(0, absl::UnavailableError("echo of the early one"));
  l.Report(2, absl::UnavailableError("late"));
  l.RecordUndeclared(9);
  EXPECT_FALSE(l.pending());
  std::vector<ChannelLoss> r = l.reports();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].channel, 2u);
  EXPECT_EQ(r[1].round, 9u);
  EXPECT_EQ(r[1].reason, "late");
  EXPECT_EQ(l.live(), 1u);
}

TEST(ChannelLossesTest, ReportsFromManyThreadsAreAllTaken) {
  ChannelLosses l;
  l.SetChannels(8);
  std::vector<std::thread> threads;
  for (uint32_t c = 0; c < 8; ++c) {
    threads.emplace_back([&l, c] {
      for (int i = 0; i < 100; ++i) l.Report(c, absl::UnavailableError("x"));
    });
  }
  for (std::thread& t : threads) t.join();
  int taken = 0;
  while (auto next = l.TakeNext()) {
    l.Declare(next->first, 0, next->second);
    ++taken;
  }
  EXPECT_EQ(taken, 8);
  EXPECT_EQ(l.live(), 0u);
  l.AddResent(5);
  l.AddResent(7);
  EXPECT_EQ(l.resent_pages(), 12u);
}

}  // namespace
}  // namespace ramferry::engine
