// ramferry-migrate --postcopy as a user runs it: both ends as processes,
// the destination's own workload resumed at the switch, every page
// verified, and the post-copy report checked against itself.
#include <signal.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/link_testbed_skip.h"
#include "tests/support/migrate_cli.h"
#include "tests/support/subprocess.h"

namespace ramferry {
namespace {

using testing::BackgroundCommand;
using testing::CommandResult;
using ::testing::HasSubstr;
using testing::kMigrate;
using testing::ParseJson;
using testing::RunCommand;
using Json = nlohmann::json;

uint64_t U(const Json& j, const char* key) {
  EXPECT_TRUE(j.contains(key)) << key << " missing from " << j.dump();
  return j.contains(key) ? j[key].get<uint64_t>() : 0;
}

// A demo run with `args` that must end migrated and verified; its report.
Json MigratedDemo(std::vector<std::string> args) {
  std::vector<std::string> argv = {kMigrate, "--demo", "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  Json j = ParseJson(r);
  EXPECT_EQ(j["outcome"], "migrated") << j["error"];
  EXPECT_EQ(j["verified"], true);
  EXPECT_EQ(j["destination"]["ok"], true) << j["destination"]["error"];
  return j;
}

// What every switched run must show on both ends: the set given at the
// switch is what the destination lacked, every missing page came as an
// answer to a request or pushed, the destination armed and its workload
// ran, and the downtime ended at the switch, not after the pages.
void ExpectSwitchedAndWhole(const Json& j, uint64_t region_pages) {
  SCOPED_TRACE(j.dump());
  EXPECT_EQ(j["switchover"], "postcopy");
  EXPECT_EQ(j["pages_verified"], region_pages);
  const Json& src = j["postcopy"];
  const Json& dst = j["destination"]["postcopy"];
  EXPECT_EQ(src["started"], true);
  EXPECT_EQ(dst["armed"], true);
  const uint64_t missing = U(src, "missing_pages_at_switch");
  EXPECT_GT(missing, 0u);
  EXPECT_LE(missing, region_pages);
  EXPECT_EQ(U(src, "missing_pages"), missing);
  EXPECT_EQ(U(dst, "missing_pages"), missing);
  EXPECT_GE(U(src, "requested_pages") + U(src, "pushed_pages"), missing);
  EXPECT_LE(U(src, "requested_pages"), missing);
  // The histogram counts every timed fault.
  uint64_t in_buckets = 0;
  for (const Json& b : dst["latency_histogram"]) in_buckets += U(b, "count");
  EXPECT_EQ(in_buckets, U(dst, "faults"));
  if (U(dst, "faults") > 0) {
    EXPECT_LE(U(dst, "latency_p50_us"), U(dst, "latency_p99_us"));
    EXPECT_GT(U(dst, "latency_max_us"), 0u);
  }
  EXPECT_EQ(dst["workload"], true);
  EXPECT_GT(U(dst, "workload_pages_written"), 0u);
  EXPECT_EQ(U(dst, "released_pages"), 0u);
  const double downtime = j["downtime_s"].get<double>();
  EXPECT_GT(downtime, 0);
  EXPECT_GE(downtime, src["start_postcopy_s"].get<double>());
  EXPECT_EQ(src["workload_kept_paused"], false);
  EXPECT_EQ(j["workload"]["running_after"], false);
}

constexpr uint64_t kPages64MiB = (64 << 20) / 4096;

TEST(MigratePostcopy, HelpListsThePostcopyFlags) {
  CommandResult r = RunCommand({kMigrate, "--help"});
  const std::string help = r.out + r.err;
  EXPECT_THAT(help, HasSubstr("--postcopy ("));
  EXPECT_THAT(help, HasSubstr("--postcopy_urgent ("));
  EXPECT_THAT(help, HasSubstr("or postcopy (switch to post-copy"));
}

// --postcopy alone is on: the live rounds run as before, then the switch
// replaces the stop-and-copy round.
TEST(MigratePostcopy, DemoSwitchesWhenTheLiveRoundsEnd) {
  const Json j = MigratedDemo(
      {"--postcopy", "--size=64MiB", "--dirty-set=8MiB", "--channels=2"});
  ExpectSwitchedAndWhole(j, kPages64MiB);
  EXPECT_EQ(j["postcopy"]["mode"], "on");
  EXPECT_GE(j["rounds"].get<int>(), 1);
  // No round is sent with the workload paused.
  EXPECT_EQ(j["remaining_bytes_per_round"].size(), j["rounds"].get<size_t>());
  EXPECT_EQ(j["destination"]["postcopy"]["urgent_channel"], true);
}

// now: no round at all; every page is missing at the switch, so the
// destination's workload faults from its first writes. The push is capped
// (64 MiB take half a second at 1 Gbit/s): uncapped on 2 busy cores it
// could place every page before the fault reader was first scheduled, and
// faults the push resolved before they were read are not timed.
TEST(MigratePostcopy, DemoNowSwitchesBeforeAnyRound) {
  const Json j =
      MigratedDemo({"--postcopy=now", "--size=64MiB", "--dirty-set=16MiB",
                    "--channels=2", "--max-bandwidth=1gbit"});
  ExpectSwitchedAndWhole(j, kPages64MiB);
  EXPECT_EQ(j["rounds"], 0);
  EXPECT_EQ(U(j["postcopy"], "missing_pages_at_switch"), kPages64MiB);
  EXPECT_GT(U(j["destination"]["postcopy"], "faults"), 0u)
      << j["destination"]["postcopy"].dump();
  EXPECT_EQ(j["destination"]["prefault"], "off");
}

// auto with a workload that cannot converge: the bandwidth cap carries
// 50 MB/s, memload rewrites its 8 MiB set at 256 MiB/s, so every round
// finds the whole set dirty again and no final round fits the limit.
// Pre-copy runs out of rounds or stalls, and the migration switches
// instead of stopping for as long as the final round would take. (On
// loopback alone the link outruns the workload, and a round can end
// with nothing dirty.)
TEST(MigratePostcopy, DemoAutoSwitchesWhenPrecopyDoesNotConverge) {
  const Json j =
      MigratedDemo({"--postcopy=auto", "--size=32MiB", "--dirty-set=8MiB",
                    "--max-bandwidth=400mbit", "--downtime-limit=20ms",
                    "--max-rounds=3", "--channels=2"});
  ExpectSwitchedAndWhole(j, (32 << 20) / 4096);
  EXPECT_EQ(j["postcopy"]["mode"], "auto");
  EXPECT_THAT(j["converged_by"].get<std::string>(),
              ::testing::AnyOf("max-rounds", "stall"));
  EXPECT_GT(j["estimated_downtime_s"].get<double>(), 0.020);
  EXPECT_GT(U(j["destination"]["postcopy"], "faults"), 0u)
      << j["destination"]["postcopy"].dump();
}

// auto where pre-copy converges: the final round fits, so it is sent.
TEST(MigratePostcopy, DemoAutoStopsAndCopiesWhenTheLimitFits) {
  const Json j = MigratedDemo({"--postcopy=auto", "--size=32MiB",
                               "--dirty-rate=0", "--downtime-limit=10s"});
  EXPECT_EQ(j["converged_by"], "downtime-limit");
  EXPECT_EQ(j["switchover"], "stop-and-copy");
  EXPECT_EQ(j["postcopy"]["started"], false);
  EXPECT_EQ(j["destination"]["postcopy"]["allowed"], true);
  EXPECT_EQ(j["destination"]["postcopy"]["armed"], false);
  EXPECT_EQ(U(j["destination"]["postcopy"], "workload_pages_written"), 0u);
}

// Off, requests ride the control connection and are answered on the bulk
// channels; the result is the same memory.
// The live rounds before the switch send re-sent pages as deltas; the
// switch and the pages after it go whole, and everything verifies.
TEST(MigratePostcopy, DeltasCarryThePrecopyRoundsBeforeTheSwitch) {
  const Json j =
      MigratedDemo({"--postcopy=on", "--size=64MiB", "--dirty-set=8MiB",
                    "--max-rounds=4", "--stall-rounds=0",
                    "--downtime-limit=1us", "--delta=on", "--channels=2"});
  // Delta rounds are quick: the switch may find no page dirty since the
  // last one, so a set of any size is right (ExpectSwitchedAndWhole wants
  // one).
  SCOPED_TRACE(j.dump());
  EXPECT_EQ(j["switchover"], "postcopy");
  EXPECT_EQ(j["pages_verified"], kPages64MiB);
  EXPECT_EQ(j["destination"]["postcopy"]["armed"], true);
  EXPECT_GT(U(j["delta"], "pages"), 0u);
  EXPECT_GT(U(j["delta"], "cache_hits"), 0u);
  EXPECT_LT(U(j["delta"], "record_bytes"), U(j["delta"], "page_bytes"));
}

TEST(MigratePostcopy, DemoWithoutTheUrgentChannel) {
  const Json j = MigratedDemo({"--postcopy=now", "--postcopy-urgent=off",
                               "--size=64MiB", "--max-bandwidth=1gbit",
                               "--dirty-set=16MiB", "--channels=2"});
  ExpectSwitchedAndWhole(j, kPages64MiB);
  EXPECT_EQ(j["postcopy"]["urgent_channel"], false);
  EXPECT_EQ(j["destination"]["postcopy"]["urgent_channel"], false);
  EXPECT_EQ(j["postcopy"]["urgent_channel_asked"], false);
  EXPECT_GT(U(j["destination"]["postcopy"], "faults"), 0u)
      << j["destination"]["postcopy"].dump();
}

// The timeout's default action with --postcopy=on|auto is to switch,
// after the round in flight (round 0 alone outlasts it here, and the
// pages the workload dirties meanwhile would take longer than the limit
// at this rate). The workload writes slowly, so its faults trickle in
// while the bulk channels push.
TEST(MigratePostcopy, ATimeoutSwitchesToPostcopy) {
  const Json j = MigratedDemo({"--postcopy=auto", "--size=32MiB",
                               "--max-bandwidth=128mbit", "--timeout=300ms",
                               "--dirty-set=4MiB", "--dirty-rate=4MB",
                               "--downtime-limit=50ms"});
  EXPECT_EQ(j["on_timeout"], "postcopy");
  EXPECT_EQ(j["converged_by"], "timeout");
  ExpectSwitchedAndWhole(j, (32 << 20) / 4096);
}

// The report's table says how the downtime ended and what faulted (the
// push capped, as above, so the faults are read and timed).
TEST(MigratePostcopy, TableHasThePostcopySectionOnBothEnds) {
  CommandResult r =
      RunCommand({kMigrate, "--demo", "--postcopy=now", "--size=32MiB",
                  "--dirty-set=8MiB", "--max-bandwidth=1gbit"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("(workload paused -> destination armed;"));
  EXPECT_THAT(r.out, HasSubstr("switchover       postcopy (--postcopy=now; "
                               "8192 pages missing at the switch"));
  EXPECT_THAT(r.out, HasSubstr("fault latency    "));
  EXPECT_THAT(r.out, HasSubstr("workload         memload wrote "));
  EXPECT_THAT(r.out, HasSubstr(" us: "));  // a non-empty bucket
}

TEST(MigratePostcopy, FlagsThatCannotWorkAreRefusedUpFront) {
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{"--demo", "--postcopy", "--transport=rdma"}, "--transport=rdma"},
      {{"--demo", "--postcopy", "--survive-channel-loss"},
       "--survive-channel-loss"},
      {{"--demo", "--postcopy=auto", "--region-file=/dev/shm/nonexistent"},
       "drop --region-file"},
      {{"--demo", "--postcopy", "--prefault=during"}, "--prefault=during"},
      {{"--demo", "--on-timeout=postcopy", "--timeout=1s"},
       "--on-timeout=postcopy needs --postcopy"},
      {{"--role=dest", "--postcopy", "--region-file=/dev/shm/nonexistent",
        "--insecure"},
       "drop --region-file"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {kMigrate, "--size=16MiB"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    CommandResult r = RunCommand(argv);
    EXPECT_EQ(r.exit_code, 2) << c.says << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.says));
  }
}

// The roles apart, the source's push capped so the post-copy phase lasts
// seconds: a destination (table output, so its progress line says when it
// armed) and a source switching at once. Returns the destination's port.
std::string StartDestination(BackgroundCommand& dest) {
  return dest.AwaitStderrLine("listening on 127.0.0.1:", absl::Seconds(30));
}
const std::vector<std::string> kDest = {
    kMigrate,     "--role=dest", "--listen=127.0.0.1:0", "--size=64MiB",
    "--insecure", "--postcopy",  "--dirty-set=64MiB",    "--stall-timeout=5s"};
std::vector<std::string> Source(const std::string& port) {
  return {kMigrate,
          "--role=source",
          "--connect=127.0.0.1:" + port,
          "--size=64MiB",
          "--insecure",
          "--postcopy=now",
          "--max-bandwidth=40mbit",
          "--dirty-set=64MiB",
          "--stall-timeout=5s",
          "--json"};
}

// The source dies after the switch: the pages the destination's workload
// waits on are lost, so the destination fills them with zeros (its
// memory is to be discarded), lets its writers run on to their stop, and
// says so; it does not hang on them.
TEST(MigratePostcopy, ADestinationThatLosesItsSourceReleasesItsWorkload) {
  BackgroundCommand dest(kDest);
  const std::string port = StartDestination(dest);
  ASSERT_FALSE(port.empty()) << dest.Stderr();
  BackgroundCommand source(Source(port));
  ASSERT_TRUE(dest.AwaitStderr("; post-copy: ", absl::Seconds(30)))
      << dest.Stderr();
  kill(source.pid(), SIGKILL);
  source.Wait(absl::Seconds(30));
  CommandResult d = dest.Wait(absl::Seconds(30));
  EXPECT_EQ(d.exit_code, 1) << d.out << d.err;
  EXPECT_THAT(d.out, HasSubstr("destination: FAILED"));
  EXPECT_THAT(d.out, HasSubstr("awaited pages filled with zeros after the "
                               "source was lost"));
  EXPECT_THAT(d.out, HasSubstr("workload         memload wrote "));
}

// The destination dies after the switch: the source's memory is the
// state at the switch, so its workload stays paused, and the report says
// so.
TEST(MigratePostcopy, ASourceThatLosesItsDestinationStaysPaused) {
  BackgroundCommand dest(kDest);
  const std::string port = StartDestination(dest);
  ASSERT_FALSE(port.empty()) << dest.Stderr();
  BackgroundCommand source(Source(port));
  ASSERT_TRUE(dest.AwaitStderr("; post-copy: ", absl::Seconds(30)))
      << dest.Stderr();
  kill(dest.pid(), SIGKILL);
  dest.Wait(absl::Seconds(30));
  CommandResult r = source.Wait(absl::Seconds(60));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const Json j = ParseJson(r);
  EXPECT_EQ(j["outcome"], "failed");
  EXPECT_EQ(j["switchover"], "postcopy");
  EXPECT_EQ(j["postcopy"]["workload_kept_paused"], true);
  EXPECT_EQ(j["workload"]["running_after"], false);
  EXPECT_EQ(j["verified"], false);
}

// Both ends must allow post-copy: a source that asks a destination that
// does not is told what to do before a round moves, and keeps running.
TEST(MigratePostcopy, ADestinationWithoutPostcopyIsNamedAsTheReason) {
  BackgroundCommand dest({kMigrate, "--role=dest", "--listen=127.0.0.1:0",
                          "--size=16MiB", "--insecure"});
  const std::string port = StartDestination(dest);
  ASSERT_FALSE(port.empty()) << dest.Stderr();
  CommandResult r =
      RunCommand({kMigrate, "--role=source", "--connect=127.0.0.1:" + port,
                  "--size=16MiB", "--insecure", "--postcopy", "--json"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const Json j = ParseJson(r);
  EXPECT_THAT(j["error"].get<std::string>(),
              HasSubstr("give it postcopy (--postcopy) too"));
  EXPECT_EQ(j["rounds"], 0);
  EXPECT_EQ(j["workload"]["running_after"], true);
}

// Over a real rate-limited link, with memload writing twice what the link
// carries: pre-copy cannot converge, auto switches, and the destination's
// workload faults on what the link has not brought yet.
TEST(MigratePostcopy, AutoOverASlowLinkSwitchesAndVerifies) {
  if (std::string why = testing::LinkTestbedSkipReason(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  // 100 Mbit/s carries 12.5 MB/s; memload writes 25 MB/s over an 8 MiB set.
  const Json j =
      MigratedDemo({"--demo-link=100mbit", "--postcopy=auto", "--size=32MiB",
                    "--dirty-set=8MiB", "--dirty-rate=25MB", "--max-rounds=3"});
  ExpectSwitchedAndWhole(j, (32 << 20) / 4096);
  EXPECT_GT(U(j["destination"]["postcopy"], "faults"), 0u)
      << j["destination"]["postcopy"].dump();
  EXPECT_EQ(j["links"][0]["rate"], "100mbit");
}

}  // namespace
}  // namespace ramferry
