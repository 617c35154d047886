#include "tools/migrate/live_control.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/region.h"
#include "tests/support/status_matchers.h"

namespace ramferry::migrate {
namespace {

using ::testing::HasSubstr;

LiveControl Source(bool postcopy = true, bool throttle = true) {
  return LiveControl(LiveControl::Role::kSource,
                     {100'000'000, ConvergenceConfig{}},
                     {.postcopy = postcopy, .throttle = throttle});
}

absl::StatusOr<Json> Ask(LiveControl& c, const Json& request) {
  return c.Handle(request.at("cmd").get<std::string>(), request);
}

// What the session hooks saw.
struct FakeSession {
  std::vector<absl::Status> aborts;
  std::vector<uint64_t> bandwidths;
  SessionStats stats;
  LiveControl::SessionHooks Hooks() {
    return {[this] { return stats; },
            [this](const absl::Status& s) { aborts.push_back(s); },
            [this](uint64_t b) { bandwidths.push_back(b); }};
  }
};

TEST(LiveControl, SetAppliesEveryFieldOrNone) {
  LiveControl c = Source();
  FakeSession session;
  c.SetSession(session.Hooks());
  absl::StatusOr<Json> bad = Ask(
      c, Json{{"cmd", "set"}, {"max-bandwidth", "1gbit"}, {"max-rounds", 0}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("max-rounds"));
  EXPECT_TRUE(session.bandwidths.empty());
  ConvergenceConfig conv;
  EXPECT_FALSE(c.TakeConvergence(&conv));

  absl::StatusOr<Json> ok = Ask(c, Json{{"cmd", "set"},
                                        {"id", 4},
                                        {"max-bandwidth", "1gbit"},
                                        {"downtime-limit", "50ms"},
                                        {"max-rounds", 7},
                                        {"auto-converge", true}});
  ASSERT_OK(ok);
  EXPECT_EQ((*ok)["max-bandwidth"], 125'000'000u);
  // The cap at once, mid-round; the rest at the next round's decision.
  EXPECT_EQ(session.bandwidths, std::vector<uint64_t>{125'000'000u});
  ASSERT_TRUE(c.TakeConvergence(&conv));
  EXPECT_EQ(conv.downtime_limit, absl::Milliseconds(50));
  EXPECT_EQ(conv.max_rounds, 7u);
  EXPECT_TRUE(conv.auto_converge);
  EXPECT_FALSE(c.TakeConvergence(&conv));
  // A number is milliseconds, or bytes per second.
  ASSERT_OK(Ask(c, Json{{"cmd", "set"}, {"downtime-limit", 20}}));
  ASSERT_TRUE(c.TakeConvergence(&conv));
  EXPECT_EQ(conv.downtime_limit, absl::Milliseconds(20));
}

TEST(LiveControl, SetRefusesWhatCannotBeDone) {
  LiveControl attached = Source(/*postcopy=*/false, /*throttle=*/false);
  EXPECT_EQ(Ask(attached, Json{{"cmd", "set"}, {"auto-converge", true}})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_OK(Ask(attached, Json{{"cmd", "set"}, {"auto-converge", false}}));
  for (const Json& bad :
       {Json{{"cmd", "set"}}, Json{{"cmd", "set"}, {"max-bandwidth", -1}},
        Json{{"cmd", "set"}, {"max-bandwidth", "warp"}},
        Json{{"cmd", "set"}, {"downtime-limit", "inf"}},
        Json{{"cmd", "set"}, {"downtime-limit", -3}},
        Json{{"cmd", "set"}, {"max-rounds", 5000000000}},
        Json{{"cmd", "set"}, {"auto-converge", 1}},
        Json{{"cmd", "set"}, {"speed", 1}}}) {
    EXPECT_EQ(Ask(attached, bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad.dump();
  }
  LiveControl dest(LiveControl::Role::kDestination, {}, {});
  EXPECT_THAT(
      Ask(dest, Json{{"cmd", "set"}, {"max-rounds", 3}}).status().message(),
      HasSubstr("the source's"));
  EXPECT_THAT(Ask(dest, Json{{"cmd", "start-postcopy"}}).status().message(),
              HasSubstr("the source's"));
  EXPECT_EQ(Ask(dest, Json{{"cmd", "migrate"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LiveControl, StartPostcopyNeedsItOnAndComesBeforeTheSwitch) {
  LiveControl off = Source(/*postcopy=*/false);
  EXPECT_THAT(Ask(off, Json{{"cmd", "start-postcopy"}}).status().message(),
              HasSubstr("--postcopy"));
  LiveControl on = Source();
  EXPECT_FALSE(on.postcopy_requested());
  ASSERT_OK(Ask(on, Json{{"cmd", "start-postcopy"}}));
  EXPECT_TRUE(on.postcopy_requested());
  on.SetState(MigrationState::kStopAndCopy);
  EXPECT_THAT(Ask(on, Json{{"cmd", "start-postcopy"}}).status().message(),
              HasSubstr("too late"));
}

TEST(LiveControl, ACancelBeforeTheCommitWinsOneAfterIsRefused) {
  LiveControl c = Source();
  FakeSession session;
  c.SetSession(session.Hooks());
  absl::StatusOr<Json> r =
      Ask(c, Json{{"cmd", "cancel"}, {"reason", "window closed"}});
  ASSERT_OK(r);
  ASSERT_EQ(session.aborts.size(), 1u);
  EXPECT_TRUE(absl::IsCancelled(session.aborts[0]));
  EXPECT_THAT(session.aborts[0].message(), HasSubstr("window closed"));
  EXPECT_TRUE(absl::IsCancelled(c.Commit()));
  // Asked again: the same cancel, not a second abort.
  ASSERT_OK(Ask(c, Json{{"cmd", "cancel"}}));
  EXPECT_EQ(session.aborts.size(), 1u);

  LiveControl committed = Source();
  committed.SetSession(session.Hooks());
  ASSERT_OK(committed.Commit());
  absl::StatusOr<Json> late = Ask(committed, Json{{"cmd", "cancel"}});
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.status().message(), HasSubstr("too late"));
  EXPECT_EQ(session.aborts.size(), 1u);
  EXPECT_EQ(Ask(c, Json{{"cmd", "cancel"}, {"reason", 3}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LiveControl, ACancelDuringSetUpAbortsTheSessionWhenItArrives) {
  LiveControl c = Source();
  ASSERT_OK(Ask(c, Json{{"cmd", "cancel"}, {"reason", "early"}}));
  FakeSession session;
  c.SetSession(session.Hooks());
  ASSERT_EQ(session.aborts.size(), 1u);
  EXPECT_THAT(session.aborts[0].message(), HasSubstr("early"));
}

TEST(LiveControl, QueryReportsTheRoundInFlightAndTheCounters) {
  LiveControl c = Source();
  absl::StatusOr<Json> before = Ask(c, Json{{"cmd", "query"}});
  ASSERT_OK(before);
  EXPECT_EQ((*before)["state"], "setup");
  EXPECT_FALSE(before->contains("bytes_sent"));  // no session yet
  FakeSession session;
  session.stats.channels.resize(2);
  session.stats.channels[0].pages = 150;
  session.stats.channels[1].pages = 50;
  session.stats.channels[0].payload_bytes = 200 * kPageSize;
  c.SetSession(session.Hooks());
  c.SetState(MigrationState::kActive);
  c.UpdateProgress(
      {{"round", 1}, {"round_pages", 300}, {"pages_before_round", 100}});
  absl::StatusOr<Json> q = Ask(c, Json{{"cmd", "query"}});
  ASSERT_OK(q);
  EXPECT_EQ((*q)["role"], "source");
  EXPECT_EQ((*q)["state"], "active");
  EXPECT_EQ((*q)["bytes_sent"], 200 * kPageSize);
  // 300 pages in the round, 100 of them sent so far.
  EXPECT_EQ((*q)["progress"]["pending_bytes"], 200 * kPageSize);
  EXPECT_EQ((*q)["progress"]["round"], 1);
  EXPECT_EQ((*q)["channels"].size(), 2u);
  EXPECT_EQ((*q)["settings"]["max-bandwidth"], 100'000'000u);
  c.SetSession({});
  EXPECT_FALSE(Ask(c, Json{{"cmd", "query"}})->contains("bytes_sent"));
}

TEST(LiveControl, TheEndIsAStateAndAnEvent) {
  LiveControl c = Source();
  std::vector<std::pair<std::string, Json>> events;
  c.OnEvent([&](absl::string_view name, Json data) {
    events.emplace_back(std::string(name), std::move(data));
  });
  c.Finished(absl::CancelledError("stop"), /*cancelled=*/true,
             Json{{"rounds", 2}});
  EXPECT_EQ(c.state(), MigrationState::kCancelled);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].first, "state-changed");
  EXPECT_EQ(events[1].first, "cancelled");
  EXPECT_EQ(events[1].second["error"], "stop");
  EXPECT_EQ(events[1].second["rounds"], 2);
  EXPECT_THAT(Ask(c, Json{{"cmd", "cancel"}}).status().message(),
              HasSubstr("has ended"));
  EXPECT_THAT(
      Ask(c, Json{{"cmd", "set"}, {"max-rounds", 2}}).status().message(),
      HasSubstr("has ended"));
}

TEST(LiveControl, ASetDuringSetUpIsAppliedWhenTheSessionStarts) {
  LiveControl c = Source();
  ASSERT_OK(Ask(c, Json{{"cmd", "set"},
                        {"max-bandwidth", "400mbit"},
                        {"downtime-limit", 40},
                        {"max-rounds", 3}}));
  EXPECT_EQ(c.settings().max_bandwidth, 50'000'000u);
  // The session starts at the flag's cap: it gets the one set since.
  FakeSession session;
  c.SetSession(session.Hooks());
  EXPECT_EQ(session.bandwidths, std::vector<uint64_t>{50'000'000u});
  ConvergenceConfig conv;
  ASSERT_TRUE(c.TakeConvergence(&conv));
  EXPECT_EQ(conv.downtime_limit, absl::Milliseconds(40));
  EXPECT_EQ(conv.max_rounds, 3u);
  // The same cap again is applied again, not taken for a no-op.
  ASSERT_OK(Ask(c, Json{{"cmd", "set"}, {"max-bandwidth", 50'000'000}}));
  EXPECT_EQ(session.bandwidths,
            (std::vector<uint64_t>{50'000'000u, 50'000'000u}));
  // A session that starts with the flag's cap, nothing set: left alone.
  LiveControl untouched = Source();
  FakeSession other;
  untouched.SetSession(other.Hooks());
  EXPECT_TRUE(other.bandwidths.empty());
}

TEST(LiveControl, TheSourceKnowsTheDestinationsCancelFromItsError) {
  LiveControl dest(LiveControl::Role::kDestination, {}, {});
  ASSERT_OK(Ask(dest, Json{{"cmd", "cancel"}, {"reason", "rack moved"}}));
  // What the engine makes of the destination's error on the source.
  const absl::Status relayed = absl::CancelledError(
      absl::StrCat("destination reported: ", dest.cancelled().message()));
  EXPECT_TRUE(IsPeerCancel(relayed));
  EXPECT_FALSE(IsPeerCancel(dest.cancelled()));  // the source's own
  EXPECT_FALSE(IsPeerCancel(absl::CancelledError("the session is ending")));
  EXPECT_FALSE(IsPeerCancel(absl::InternalError(relayed.message())));
}

}  // namespace
}  // namespace ramferry::migrate
