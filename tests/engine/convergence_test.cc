// ConvergencePolicy: the decisions pre-copy takes after each round, fed
// with synthetic measurements.
#include "ramferry/convergence.h"

#include <optional>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;

// A round that did not fit: `remaining` MiB left, the link at 100 MB/s
// and the workload dirtying `dirty` MB/s.
RoundObservation Round(uint64_t n, uint64_t remaining_mib,
                       double dirty_mb = 10) {
  RoundObservation o;
  o.live_rounds = n;
  o.remaining_bytes = remaining_mib * kMiB;
  o.estimated_downtime = absl::Seconds(remaining_mib / 100.0 + 1);
  o.dirty_bytes_per_s = dirty_mb * 1e6;
  o.link_bytes_per_s = 100e6;
  o.elapsed = absl::Seconds(n);
  return o;
}

ConvergenceConfig NoStall() {
  ConvergenceConfig c;
  c.stall_rounds = 0;
  return c;
}

TEST(ConvergencePolicy, StopsOnceTheEstimateFits) {
  ConvergencePolicy p{ConvergenceConfig{}};
  EXPECT_EQ(p.Next(Round(1, 500)).action, ConvergenceAction::kContinue);
  RoundObservation fits = Round(2, 10);
  fits.estimated_downtime = absl::Milliseconds(299);
  const ConvergenceDecision d = p.Next(fits);
  EXPECT_EQ(d.action, ConvergenceAction::kStopAndCopy);
  EXPECT_EQ(d.reason, "downtime-limit");
}

TEST(ConvergencePolicy, AnUnmeasuredLinkNeverFits) {
  ConvergencePolicy p{NoStall()};
  RoundObservation o = Round(1, 0);
  o.estimated_downtime = std::nullopt;
  EXPECT_EQ(p.Next(o).action, ConvergenceAction::kContinue);
}

TEST(ConvergencePolicy, MaxRoundsStops) {
  ConvergenceConfig c = NoStall();
  c.max_rounds = 3;
  ConvergencePolicy p(c);
  EXPECT_EQ(p.Next(Round(1, 100)).action, ConvergenceAction::kContinue);
  EXPECT_EQ(p.Next(Round(2, 100)).action, ConvergenceAction::kContinue);
  const ConvergenceDecision d = p.Next(Round(3, 100));
  EXPECT_EQ(d.action, ConvergenceAction::kStopAndCopy);
  EXPECT_EQ(d.reason, "max-rounds");
}

// A control client changes the limits mid-migration: the next decision
// follows them, and what was observed stays.
TEST(ConvergencePolicy, ReconfiguredLimitsTakeEffectAtTheNextRound) {
  ConvergencePolicy p(NoStall());
  EXPECT_EQ(p.Next(Round(1, 400)).action, ConvergenceAction::kContinue);
  EXPECT_EQ(p.Next(Round(2, 300)).action, ConvergenceAction::kContinue);
  ConvergenceConfig c = p.config();
  c.max_rounds = 3;
  p.Reconfigure(c);
  EXPECT_EQ(p.lowest_remaining_bytes(), 300 * kMiB);
  ConvergenceDecision d = p.Next(Round(3, 300));
  EXPECT_EQ(d.action, ConvergenceAction::kStopAndCopy);
  EXPECT_EQ(d.reason, "max-rounds");

  // 4 s estimated (300 MiB at 100 MB/s + 1 s): a 5 s limit fits it.
  ConvergencePolicy q(NoStall());
  EXPECT_EQ(q.Next(Round(1, 300)).action, ConvergenceAction::kContinue);
  c = q.config();
  c.downtime_limit = absl::Seconds(5);
  q.Reconfigure(c);
  d = q.Next(Round(2, 300));
  EXPECT_EQ(d.action, ConvergenceAction::kStopAndCopy);
  EXPECT_EQ(d.reason, "downtime-limit");
}

TEST(ConvergencePolicy, AutoConvergeTurnedOffReleasesTheThrottle) {
  ConvergenceConfig c = NoStall();
  c.auto_converge = true;
  c.max_rounds = 100;
  ConvergencePolicy p(c);
  for (uint64_t n = 1; n <= 4; ++n) p.Next(Round(n, 500, /*dirty_mb=*/90));
  ASSERT_GT(p.throttle_percent(), 0);
  c.auto_converge = false;
  p.Reconfigure(c);
  EXPECT_EQ(p.throttle_percent(), 0);
  EXPECT_EQ(p.Next(Round(5, 500, 90)).throttle_percent, 0);
}

TEST(ConvergencePolicy, TimeoutCancelsForcesOrSwitchesAsConfigured) {
  const std::pair<OnTimeout, ConvergenceAction> cases[] = {
      {OnTimeout::kCancel, ConvergenceAction::kCancel},
      {OnTimeout::kForce, ConvergenceAction::kStopAndCopy},
      {OnTimeout::kPostcopy, ConvergenceAction::kPostcopy}};
  for (const auto& [on, action] : cases) {
    ConvergenceConfig c = NoStall();
    c.timeout = absl::Seconds(3);
    c.on_timeout = on;
    ConvergencePolicy p(c);
    EXPECT_EQ(p.Next(Round(1, 100)).action, ConvergenceAction::kContinue);
    const ConvergenceDecision d = p.Next(Round(3, 100));
    EXPECT_EQ(d.reason, "timeout");
    EXPECT_EQ(d.action, action) << OnTimeoutName(on);
  }
}

// With post-copy allowed, every stop without a fitting final round
// switches; a final round that fits is still sent.
TEST(ConvergencePolicy, PostcopyAllowedSwitchesWhereNoFinalRoundFits) {
  ConvergenceConfig c;
  c.postcopy = true;
  c.max_rounds = 3;
  c.stall_rounds = 0;
  {
    ConvergencePolicy p(c);
    p.Next(Round(1, 100));
    p.Next(Round(2, 100));
    const ConvergenceDecision d = p.Next(Round(3, 100));
    EXPECT_EQ(d.action, ConvergenceAction::kPostcopy);
    EXPECT_EQ(d.reason, "max-rounds");
  }
  {
    ConvergencePolicy p(c);
    RoundObservation fits = Round(1, 10);
    fits.estimated_downtime = absl::Milliseconds(100);
    EXPECT_EQ(p.Next(fits).action, ConvergenceAction::kStopAndCopy);
  }
  c.max_rounds = 30;
  c.stall_rounds = 2;
  ConvergencePolicy p(c);
  ConvergenceDecision d;
  for (uint64_t n = 1; n < 10 && d.action == ConvergenceAction::kContinue;
       ++n) {
    d = p.Next(Round(n, 100));
  }
  EXPECT_EQ(d.action, ConvergenceAction::kPostcopy);
  EXPECT_EQ(d.reason, "stall");
}

TEST(ConvergencePolicy, AFittingEstimateWinsOverTheTimeout) {
  ConvergenceConfig c;
  c.timeout = absl::Seconds(1);
  ConvergencePolicy p(c);
  RoundObservation o = Round(5, 1);
  o.estimated_downtime = absl::Milliseconds(10);
  EXPECT_EQ(p.Next(o).reason, "downtime-limit");
}

TEST(ConvergencePolicy, AStallStopsAtTheLowestPointSeen) {
  ConvergenceConfig c;
  c.stall_rounds = 3;
  ConvergencePolicy p(c);
  // Shrinks to 50, then hovers above it: stalled after 3 rounds without
  // a new low, and stopped only when it comes back near 50.
  const std::vector<uint64_t> remaining = {400, 200, 50, 80, 90, 70, 75, 52};
  std::vector<ConvergenceAction> actions;
  for (size_t i = 0; i < remaining.size(); ++i) {
    actions.push_back(p.Next(Round(i + 1, remaining[i])).action);
    if (actions.back() != ConvergenceAction::kContinue) break;
  }
  ASSERT_EQ(actions.size(), remaining.size());
  EXPECT_EQ(actions.back(), ConvergenceAction::kStopAndCopy);
  EXPECT_TRUE(p.stalled());
  EXPECT_EQ(p.lowest_remaining_bytes(), 50 * kMiB);
}

TEST(ConvergencePolicy, AStallThatNeverComesBackStopsAfterAWindow) {
  ConvergenceConfig c;
  c.stall_rounds = 2;
  ConvergencePolicy p(c);
  EXPECT_EQ(p.Next(Round(1, 50)).action, ConvergenceAction::kContinue);
  EXPECT_EQ(p.Next(Round(2, 90)).action, ConvergenceAction::kContinue);
  // Stalled here (2 rounds without a new low), but far above the low.
  EXPECT_EQ(p.Next(Round(3, 90)).action, ConvergenceAction::kContinue);
  EXPECT_TRUE(p.stalled());
  const ConvergenceDecision d = p.Next(Round(4, 90));
  EXPECT_EQ(d.action, ConvergenceAction::kStopAndCopy);
  EXPECT_EQ(d.reason, "stall");
}

TEST(ConvergencePolicy, SteadyProgressIsNoStall) {
  ConvergenceConfig c;
  c.stall_rounds = 2;
  ConvergencePolicy p(c);
  uint64_t remaining = 1000;
  for (uint64_t n = 1; n <= 20; ++n, remaining = remaining * 9 / 10) {
    ASSERT_EQ(p.Next(Round(n, remaining)).action, ConvergenceAction::kContinue)
        << "round " << n;
  }
  EXPECT_FALSE(p.stalled());
}

TEST(ConvergencePolicy, StallDetectionOffLeavesItToMaxRounds) {
  ConvergenceConfig c = NoStall();
  c.max_rounds = 10;
  ConvergencePolicy p(c);
  for (uint64_t n = 1; n < 10; ++n) {
    ASSERT_EQ(p.Next(Round(n, 100)).action, ConvergenceAction::kContinue);
  }
  EXPECT_EQ(p.Next(Round(10, 100)).reason, "max-rounds");
}

TEST(ConvergencePolicy, AutoConvergeThrottlesInStepsWhileTheWorkloadOutruns) {
  ConvergenceConfig c;
  c.auto_converge = true;
  c.stall_rounds = 3;
  c.max_rounds = 1000;
  ConvergencePolicy p(c);
  // Dirtying 80 MB/s of a 100 MB/s link: more than half, every round.
  std::vector<int> throttles;
  for (uint64_t n = 1; n <= 40; ++n) {
    const ConvergenceDecision d = p.Next(Round(n, 100, 80));
    throttles.push_back(d.throttle_percent);
    if (d.action != ConvergenceAction::kContinue) break;
  }
  // Two rounds outrunning, then 20%; every two rounds after, 10% more, up
  // to 99%; no stall is called while a step remains.
  EXPECT_EQ(throttles[0], 0);
  EXPECT_EQ(throttles[1], 20);
  EXPECT_EQ(throttles[3], 30);
  EXPECT_EQ(throttles[5], 40);
  EXPECT_EQ(p.throttle_percent(), 99);
  EXPECT_TRUE(p.stalled());
  // 99% from round 18; three rounds later, a stall at the lowest point.
  EXPECT_EQ(throttles[17], 99);
  EXPECT_EQ(throttles.size(), 21u);
}

TEST(ConvergencePolicy, AutoConvergeLeavesAWorkloadTheLinkOutpaces) {
  ConvergenceConfig c;
  c.auto_converge = true;
  ConvergencePolicy p(c);
  for (uint64_t n = 1; n <= 10; ++n) {
    ASSERT_EQ(p.Next(Round(n, 1000 - n * 50, 30)).throttle_percent, 0);
  }
}

TEST(ConvergencePolicy, ParsesTimeoutActions) {
  EXPECT_EQ(*ParseOnTimeout("cancel"), OnTimeout::kCancel);
  EXPECT_EQ(*ParseOnTimeout("force"), OnTimeout::kForce);
  EXPECT_EQ(*ParseOnTimeout("postcopy"), OnTimeout::kPostcopy);
  EXPECT_THAT(ParseOnTimeout("postpone"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown timeout action 'postpone'")));
  EXPECT_STREQ(OnTimeoutName(OnTimeout::kForce), "force");
  EXPECT_STREQ(OnTimeoutName(OnTimeout::kPostcopy), "postcopy");
}

}  // namespace
}  // namespace ramferry
