// ramferry-migrate's post-copy choices: the flags' values, which way the
// live rounds end, and the combinations refused before a run starts.
#include "tools/migrate/postcopy_mode.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::migrate {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;

TEST(PostcopyMode, ParsesEveryModeAndNamesItBack) {
  for (PostcopyMode m : {PostcopyMode::kOff, PostcopyMode::kOn,
                         PostcopyMode::kNow, PostcopyMode::kAuto}) {
    absl::StatusOr<PostcopyMode> back = ParsePostcopyMode(PostcopyModeName(m));
    ASSERT_OK(back) << PostcopyModeName(m);
    EXPECT_EQ(*back, m);
  }
  EXPECT_EQ(*ParsePostcopyMode("true"), PostcopyMode::kOn);
  EXPECT_EQ(*ParsePostcopyMode("false"), PostcopyMode::kOff);
  absl::StatusOr<PostcopyMode> bad = ParsePostcopyMode("later");
  ASSERT_THAT(
      bad,
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "on (after the live rounds), now (before any round), auto")));
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown --postcopy 'later'"));
}

TEST(TimeoutAction, DefaultFollowsThePostcopyMode) {
  EXPECT_EQ(*ParseTimeoutAction("", PostcopyMode::kOff),
            TimeoutAction::kCancel);
  EXPECT_EQ(*ParseTimeoutAction("", PostcopyMode::kNow),
            TimeoutAction::kCancel);
  EXPECT_EQ(*ParseTimeoutAction("", PostcopyMode::kOn),
            TimeoutAction::kPostcopy);
  EXPECT_EQ(*ParseTimeoutAction("", PostcopyMode::kAuto),
            TimeoutAction::kPostcopy);
  // Given, it is what was given.
  EXPECT_EQ(*ParseTimeoutAction("cancel", PostcopyMode::kAuto),
            TimeoutAction::kCancel);
  EXPECT_EQ(*ParseTimeoutAction("force", PostcopyMode::kOn),
            TimeoutAction::kForce);
  EXPECT_EQ(*ParseTimeoutAction("postcopy", PostcopyMode::kOff),
            TimeoutAction::kPostcopy);
  absl::StatusOr<TimeoutAction> bad =
      ParseTimeoutAction("postpone", PostcopyMode::kOff);
  ASSERT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("unknown --on-timeout 'postpone'")));
  EXPECT_THAT(bad.status().message(), HasSubstr("cancel (the source keeps"));
}

TEST(ChooseSwitchover, OffStopsAndCopiesWhereThePolicySays) {
  for (const char* reason :
       {"downtime-limit", "stall", "max-rounds", "timeout"}) {
    EXPECT_EQ(ChooseSwitchover(PostcopyMode::kOff,
                               ConvergenceAction::kStopAndCopy, reason),
              Switchover::kStopAndCopy)
        << reason;
  }
}

TEST(ChooseSwitchover, OnAlwaysSwitchesToPostcopy) {
  for (const char* reason : {"downtime-limit", "stall", "max-rounds"}) {
    EXPECT_EQ(ChooseSwitchover(PostcopyMode::kOn,
                               ConvergenceAction::kStopAndCopy, reason),
              Switchover::kPostcopy)
        << reason;
  }
}

// auto: the policy (ConvergenceConfig::postcopy) says where no final
// round fits; the tool follows it.
TEST(ChooseSwitchover, AutoFollowsThePolicy) {
  ConvergenceConfig c;
  c.postcopy = true;
  c.max_rounds = 2;
  c.stall_rounds = 0;
  ConvergencePolicy policy(c);
  RoundObservation o;
  o.remaining_bytes = 100 << 20;
  o.estimated_downtime = absl::Seconds(2);
  o.live_rounds = 2;
  const ConvergenceDecision d = policy.Next(o);
  EXPECT_EQ(ChooseSwitchover(PostcopyMode::kAuto, d.action, d.reason),
            Switchover::kPostcopy);
  o.estimated_downtime = absl::Milliseconds(10);
  ConvergencePolicy fits(c);
  const ConvergenceDecision f = fits.Next(o);
  EXPECT_EQ(ChooseSwitchover(PostcopyMode::kAuto, f.action, f.reason),
            Switchover::kStopAndCopy);
}

TEST(ChooseSwitchover, ATimeoutDoesWhatOnTimeoutSays) {
  EXPECT_EQ(ChooseSwitchover(PostcopyMode::kAuto, ConvergenceAction::kPostcopy,
                             "timeout"),
            Switchover::kPostcopy);
  EXPECT_EQ(ChooseSwitchover(PostcopyMode::kAuto,
                             ConvergenceAction::kStopAndCopy, "timeout"),
            Switchover::kStopAndCopy);
  EXPECT_EQ(ChooseSwitchover(PostcopyMode::kOn, ConvergenceAction::kStopAndCopy,
                             "timeout"),
            Switchover::kStopAndCopy);
}

PostcopyFlagCheck Allowed() {
  PostcopyFlagCheck c;
  c.mode = PostcopyMode::kOn;
  c.on_timeout = TimeoutAction::kPostcopy;
  c.transport = "tcp";
  c.destination = true;
  c.prefault = "auto";
  c.urgent = "on";
  return c;
}

TEST(CheckPostcopyFlags, APlainPostcopyRunPasses) {
  EXPECT_OK(CheckPostcopyFlags(Allowed()));
  for (const char* t : {"tcp-zerocopy", "uring-zc", "auto"}) {
    PostcopyFlagCheck c = Allowed();
    c.transport = t;
    EXPECT_OK(CheckPostcopyFlags(c)) << t;
  }
  for (const char* p : {"before", "off", "auto"}) {
    PostcopyFlagCheck c = Allowed();
    c.prefault = p;
    EXPECT_OK(CheckPostcopyFlags(c)) << p;
  }
}

TEST(CheckPostcopyFlags, EachRefusalNamesTheFlagInTheWay) {
  struct Case {
    void (*change)(PostcopyFlagCheck&);
    const char* says;
  };
  const Case cases[] = {
      {[](PostcopyFlagCheck& c) { c.transport = "rdma"; }, "--transport=rdma"},
      {[](PostcopyFlagCheck& c) { c.survive_channel_loss = true; },
       "--survive-channel-loss"},
      {[](PostcopyFlagCheck& c) { c.region_file = "/dev/shm/vm"; },
       "drop --region-file"},
      {[](PostcopyFlagCheck& c) { c.prefault = "during"; },
       "--prefault=during"},
      {[](PostcopyFlagCheck& c) { c.prefault = "idle"; }, "--prefault=idle"},
      {[](PostcopyFlagCheck& c) { c.urgent = "maybe"; }, "--postcopy-urgent"},
      {[](PostcopyFlagCheck& c) {
         c.mode = PostcopyMode::kOff;
         c.on_timeout = TimeoutAction::kPostcopy;
       },
       "--on-timeout=postcopy needs --postcopy"},
  };
  for (const Case& k : cases) {
    PostcopyFlagCheck c = Allowed();
    k.change(c);
    absl::Status s = CheckPostcopyFlags(c);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << k.says << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(k.says));
  }
}

// A source may migrate a shared file: only the destination's memory must
// be private anonymous. Without --postcopy nothing is refused.
TEST(CheckPostcopyFlags, WhatOnlyTheDestinationOrPostcopyMinds) {
  PostcopyFlagCheck source = Allowed();
  source.destination = false;
  source.region_file = "/dev/shm/vm";
  source.prefault = "during";
  EXPECT_OK(CheckPostcopyFlags(source));
  PostcopyFlagCheck off = Allowed();
  off.mode = PostcopyMode::kOff;
  off.on_timeout = TimeoutAction::kCancel;
  off.transport = "rdma";
  off.survive_channel_loss = true;
  off.region_file = "/dev/shm/vm";
  EXPECT_OK(CheckPostcopyFlags(off));
}

}  // namespace
}  // namespace ramferry::migrate
