// The migration report names the channels a session went on without
// (--survive-channel-loss), in the table and in the JSON.
#include "tools/migrate/report.h"

#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ramferry::migrate {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

PrecopyReport WithALoss() {
  PrecopyReport r;
  r.stats.channels.resize(4);
  for (uint32_t c = 0; c < 4; ++c) r.stats.channels[c].channel = c;
  r.stats.channels[2].lost = 1;
  r.stats.channels_lost.push_back({2, 3, "channel 2: connection reset"});
  r.stats.resent_pages = 417;
  return r;
}

TEST(MigrateReport, SourceTableSaysWhichChannelWasLostWhenAndWhy) {
  const std::string t = SourceTable(RunDescription{}, WithALoss());
  EXPECT_THAT(t, HasSubstr("channels lost    channel 2 in round 3 (channel 2: "
                           "connection reset); 417 pages re-sent"));
}

TEST(MigrateReport, SourceTableSaysNoneWithoutALoss) {
  EXPECT_THAT(SourceTable(RunDescription{}, PrecopyReport{}),
              HasSubstr("channels lost    none"));
}

TEST(MigrateReport, SourceJsonListsTheLossAndTheResentPages) {
  const std::string j = SourceJson(RunDescription{}, WithALoss(), "");
  EXPECT_THAT(j, HasSubstr(R"("resent_pages":417)"));
  EXPECT_THAT(j, HasSubstr(R"("channels_lost":[{"channel":2,"round":3,)"
                           R"("reason":"channel 2: connection reset"}])"));
  EXPECT_THAT(j, HasSubstr(R"("lost":1)"));
}

TEST(MigrateReport, DestinationReportsTheLossToo) {
  DestinationReport d;
  d.stats.channels_lost.push_back({1, 0, "source: reset"});
  EXPECT_THAT(DestinationTable(d),
              HasSubstr("channels lost: channel 1 in round 0 (source: reset)"));
  EXPECT_THAT(DestinationJson(d),
              HasSubstr(R"("channels_lost":[{"channel":1,"round":0,)"));
  EXPECT_THAT(DestinationTable(DestinationReport{}),
              Not(HasSubstr("channels lost")));
}

// Channels 0 and 2 went to one link, 1 and 3 to another; 2 was lost.
PrecopyReport OverTwoLinks() {
  PrecopyReport r = WithALoss();
  r.transfer_s = 2;
  for (uint32_t c = 0; c < 4; ++c) {
    ChannelStats& s = r.stats.channels[c];
    s.endpoint = c % 2 ? "10.77.1.2:7070" : "10.77.0.2:7070";
    s.payload_bytes = 1'000'000'000;
    s.header_bytes = 1'000'000 * (c + 1);
  }
  return r;
}

TEST(MigrateReport, EachLinkGetsALineWithItsChannelsBytesAndRate) {
  RunDescription run;
  run.link_rates = {{"10.77.0.2", "1gbit"}, {"10.77.1.2", "500mbit"}};
  const std::string t = SourceTable(run, OverTwoLinks());
  EXPECT_THAT(t, HasSubstr("link             10.77.0.2:7070 (1gbit): "
                           "channels 0,2 (1 lost), "));
  EXPECT_THAT(t, HasSubstr("link             10.77.1.2:7070 (500mbit): "
                           "channels 1,3, "));
  // (2e9 + 6e6 bytes) / 2 s, in the units of the sizes beside it
  EXPECT_THAT(t, HasSubstr("956.5MiB/s\n"));
  const std::string j = SourceJson(run, OverTwoLinks(), "");
  EXPECT_THAT(j, HasSubstr(R"("links":[{"endpoint":"10.77.0.2:7070",)"
                           R"("channels":[0,2],"channels_lost":1,)"
                           R"("payload_bytes":2000000000,"bytes":2004000000,)"
                           R"("gb_per_s":1.002,"rate":"1gbit"})"));
  EXPECT_THAT(j, HasSubstr(R"("endpoint":"10.77.1.2:7070")"));
}

TEST(MigrateReport, OneLinkWithoutARateHasNoLinkLine) {
  PrecopyReport r = OverTwoLinks();
  for (ChannelStats& c : r.stats.channels) c.endpoint = "10.0.0.2:7070";
  EXPECT_THAT(SourceTable(RunDescription{}, r), Not(HasSubstr("  link  ")));
  EXPECT_THAT(SourceJson(RunDescription{}, r, ""),
              HasSubstr(R"("channels":[0,1,2,3],"channels_lost":1,)"));
}

PostcopyStats SomeFaults() {
  PostcopyStats p;
  p.started = true;
  p.urgent_channel = true;
  p.missing_pages = 2048;
  p.requested_pages = 300;
  p.urgent_pages = 290;
  p.pushed_pages = 1758;
  p.duplicate_pages = 7;
  p.fault_messages = 310;
  p.latency_buckets = {0, 0, 0, 0, 0, 0, 0, 100, 150, 0, 50};
  p.faults = 300;
  p.latency_p50_us = 256;
  p.latency_p99_us = 1024;
  p.latency_max_us = 900;
  p.blocked_us = 75'500;
  p.switch_ns = 4'000'000;
  p.duration_ns = 1'250'000'000;
  return p;
}

PrecopyReport SwitchedToPostcopy() {
  PrecopyReport r;
  r.postcopy_mode = "auto";
  r.switchover = "postcopy";
  r.converged_by = "stall";
  r.postcopy_missing_pages = 2048;
  r.downtime_s = 0.0123;
  r.final_collect_s = 0.002;
  r.switch_s = 0.0103;
  r.postcopy_s = 1.26;
  r.stats.postcopy = SomeFaults();
  return r;
}

RunDescription AutoRun() {
  RunDescription run;
  run.postcopy = "auto";
  run.on_timeout = "postcopy";
  run.verify_mode = "full";
  return run;
}

TEST(MigrateReport, DestinationPostcopyLinesGiveFaultsAndTheHistogram) {
  const std::string t = PostcopyLines(SomeFaults(), /*destination=*/true);
  EXPECT_THAT(t, HasSubstr("post-copy        armed, urgent channel on"));
  EXPECT_THAT(t, HasSubstr("missing pages    2048 (8MiB) at the switch: 300 "
                           "requested, 290 placed from urgent answers, 7 "
                           "duplicates dropped"));
  EXPECT_THAT(t, HasSubstr("faults           300 timed (310 fault messages, "
                           "0 resolved locally as zero pages); latency p50 "
                           "256 us, p99 1024 us, max 900 us; blocked 75.5 ms"));
  EXPECT_THAT(t, HasSubstr("fault latency    [64,128) us: 100  [128,256) us: "
                           "150  [512,1024) us: 50\n"));
  EXPECT_THAT(t, HasSubstr("switch 4.0 ms, then 1250.0 ms until the last page "
                           "was placed"));
  EXPECT_THAT(PostcopyLines(PostcopyStats{}, true),
              HasSubstr("no faults timed"));
}

// The source has no faults of its own to time: it says what it sent.
TEST(MigrateReport, SourcePostcopyLinesGiveWhatWasRequestedAndPushed) {
  const std::string t = PostcopyLines(SomeFaults(), /*destination=*/false);
  EXPECT_THAT(t, HasSubstr("missing pages    2048 (8MiB) at the switch: 300 "
                           "requested by the destination's faults (290 "
                           "answered on the urgent channel), 1758 pushed on "
                           "the bulk channels"));
  EXPECT_THAT(t, HasSubstr("until every page was pushed and confirmed"));
  EXPECT_THAT(t, Not(HasSubstr("fault latency")));
}

TEST(MigrateReport, SourceTableSaysThePostcopyDowntimeEndsWhenArmed) {
  const std::string t = SourceTable(AutoRun(), SwitchedToPostcopy());
  EXPECT_THAT(t, HasSubstr("downtime         12.3 ms (workload paused -> "
                           "destination armed;"));
  EXPECT_THAT(t, HasSubstr("last collect 2.0 ms, switch 10.3 ms"));
  EXPECT_THAT(t, HasSubstr("switchover       postcopy (--postcopy=auto; 2048 "
                           "pages missing at the switch, then 1260.0 ms"));
  EXPECT_THAT(t, HasSubstr("1758 pushed on the bulk channels"));
  EXPECT_THAT(t, HasSubstr("verification     full, 0.0 ms once the "
                           "destination held every page"));
  EXPECT_THAT(t, Not(HasSubstr("final round")));
  // No round was sent paused: no legend for a mark nothing carries.
  EXPECT_THAT(t, Not(HasSubstr("* = workload paused")));
}

TEST(MigrateReport, ADowntimeOverItsLimitIsFlaggedWithBothEstimates) {
  RunDescription run;
  run.downtime_limit_s = 0.020;
  PrecopyReport r;
  r.switchover = "stop-and-copy";
  r.downtime_s = 0.0242;
  r.estimated_downtime_s = 0.0011;
  r.switchover_estimate_s = 0.015;
  r.final_collect_s = 0.0128;
  r.final_round_s = 0.0113;
  r.rounds = {{100, 409600, 409600, 0.5, false},
              {10, 40960, 40960, 0.01, true}};
  r.switchovers_resumed = 1;
  r.resumed_stall_s = 0.031;
  std::string t = SourceTable(run, r);
  EXPECT_THAT(t, HasSubstr("downtime         24.2 ms OVER THE LIMIT "
                           "(estimated 1.1 ms before the pause, 15.0 ms once "
                           "paused; limit 20 ms): pause and last collect "
                           "12.8 ms, final round 11.3 ms (predicted 2.2 ms)"));
  EXPECT_THAT(t, HasSubstr("pages per round  100 10*  (* = workload paused)"));
  EXPECT_THAT(t, HasSubstr("given up         1 stop-and-copy attempt(s)"));
  EXPECT_THAT(t, HasSubstr("stalled 31.0 ms in all"));
  nlohmann::json j = nlohmann::json::parse(SourceJson(run, r, ""));
  EXPECT_TRUE(j["downtime_over_limit"].get<bool>());
  EXPECT_EQ(j["switchovers_resumed"], 1);
  EXPECT_DOUBLE_EQ(j["switchover_estimate_s"].get<double>(), 0.015);

  r.downtime_s = 0.019;
  t = SourceTable(run, r);
  EXPECT_THAT(t, HasSubstr("downtime         19.0 ms (estimated"));
  j = nlohmann::json::parse(SourceJson(run, r, ""));
  EXPECT_FALSE(j["downtime_over_limit"].get<bool>());
}

// A run without --postcopy keeps the report it had.
TEST(MigrateReport, PrecopyTableHasNoPostcopyLines) {
  PrecopyReport r;
  r.switchover = "stop-and-copy";
  const std::string t = SourceTable(RunDescription{}, r);
  EXPECT_THAT(t, HasSubstr("final round"));
  EXPECT_THAT(t, Not(HasSubstr("post-copy")));
  EXPECT_THAT(t, Not(HasSubstr("  switchover  ")));
}

TEST(MigrateReport, SourceJsonCarriesThePostcopyObject) {
  const nlohmann::json j =
      nlohmann::json::parse(SourceJson(AutoRun(), SwitchedToPostcopy(), ""));
  EXPECT_EQ(j["switchover"], "postcopy");
  EXPECT_EQ(j["on_timeout"], "postcopy");
  EXPECT_DOUBLE_EQ(j["downtime_s"].get<double>(), 0.0123);
  const nlohmann::json& p = j["postcopy"];
  EXPECT_EQ(p["mode"], "auto");
  EXPECT_EQ(p["missing_pages_at_switch"], 2048);
  EXPECT_EQ(p["missing_pages"], 2048);
  EXPECT_EQ(p["requested_pages"], 300);
  EXPECT_EQ(p["pushed_pages"], 1758);
  EXPECT_EQ(p["faults"], 300);
  EXPECT_EQ(p["latency_histogram"].size(), 3u);
  EXPECT_DOUBLE_EQ(p["start_postcopy_s"].get<double>(), 0.0103);
  EXPECT_DOUBLE_EQ(p["complete_postcopy_s"].get<double>(), 1.26);
  EXPECT_EQ(p["workload_kept_paused"], false);
}

TEST(MigrateReport, FailedAfterTheSwitchSaysTheWorkloadStaysPaused) {
  PrecopyReport r = SwitchedToPostcopy();
  r.status = absl::UnavailableError("peer stalled");
  r.workload_kept_paused = true;
  EXPECT_THAT(SourceTable(AutoRun(), r),
              HasSubstr("kept paused on the source: post-copy failed after "
                        "the switch began"));
  EXPECT_THAT(SourceJson(AutoRun(), r, ""),
              HasSubstr(R"("workload_kept_paused":true)"));
  EXPECT_THAT(SourceJson(AutoRun(), r, ""), HasSubstr(R"("outcome":"failed")"));
}

// Audit 3, F4: the destination refused FINISH (or the switch) and said
// so: the report says the migration did not commit and the workload
// resumed, not that the outcome is unknown.
TEST(MigrateReport, ARefusalByTheDestinationSaysNotCommitted) {
  PrecopyReport r;
  r.status = absl::CancelledError(
      "not committed: the destination refused FINISH ...: destination "
      "reported: cancelled there");
  r.destination_refused = true;
  r.workload_running_after = true;
  const std::string t = SourceTable(RunDescription{}, r);
  EXPECT_THAT(t, HasSubstr("NOT COMMITTED: the destination refused to "
                           "commit"));
  EXPECT_THAT(t, HasSubstr("the workload resumed here"));
  EXPECT_THAT(t, Not(HasSubstr("UNKNOWN")));
  EXPECT_THAT(SourceJson(RunDescription{}, r, ""),
              HasSubstr(R"("destination_refused":true)"));
  EXPECT_THAT(SourceJson(RunDescription{}, PrecopyReport{}, ""),
              HasSubstr(R"("destination_refused":false)"));
}

TEST(MigrateReport, AResumedPostcopySaysHowOftenAndWhy) {
  PrecopyReport r = SwitchedToPostcopy();
  r.postcopy_resumes = 2;
  r.postcopy_cut_error = "UNAVAILABLE: peer stalled";
  EXPECT_THAT(SourceTable(AutoRun(), r),
              HasSubstr("resumed          2 times (the figures above are the "
                        "last session's); last cut: UNAVAILABLE: peer "
                        "stalled"));
  const nlohmann::json j = nlohmann::json::parse(SourceJson(AutoRun(), r, ""));
  EXPECT_EQ(j["postcopy"]["resumed"], 2);
  EXPECT_EQ(j["postcopy"]["cut_error"], "UNAVAILABLE: peer stalled");
  EXPECT_THAT(SourceTable(AutoRun(), SwitchedToPostcopy()),
              Not(HasSubstr("resumed  ")));
}

TEST(MigrateReport, DestinationReportsItsWorkloadAndFaults) {
  DestinationReport d;
  d.postcopy_allowed = true;
  d.postcopy_armed = true;
  d.workload = true;
  d.workload_pages_written = 123456;
  d.workload_s = 1.5;
  d.stats.postcopy = SomeFaults();
  const std::string t = DestinationTable(d);
  EXPECT_THAT(t, HasSubstr("workload         memload wrote 123456 pages here "
                           "in 1.50 s after the switch"));
  EXPECT_THAT(t, HasSubstr("fault latency    [64,128) us: 100"));
  EXPECT_EQ(t.back(), '\n');
  EXPECT_EQ(t.find("\n\n"), std::string::npos) << t;
  const nlohmann::json j = nlohmann::json::parse(DestinationJson(d));
  EXPECT_EQ(j["postcopy"]["armed"], true);
  EXPECT_EQ(j["postcopy"]["workload_pages_written"], 123456);
  EXPECT_EQ(j["postcopy"]["faults"], 300);
  EXPECT_EQ(j["postcopy"]["latency_p99_us"], 1024);

  DestinationReport unused;
  unused.postcopy_allowed = true;
  EXPECT_THAT(DestinationTable(unused),
              HasSubstr("post-copy allowed, not used"));
  EXPECT_THAT(DestinationTable(DestinationReport{}),
              Not(HasSubstr("post-copy")));
}

}  // namespace
}  // namespace ramferry::migrate

namespace ramferry::migrate {
namespace {

TEST(MigrateReport, AnAttachedWorkloadSaysWhoItIsAndHowItWasPaused) {
  RunDescription run;
  run.attached = "pid 42 at /run/w.sock";
  run.pause_method = "SIGSTOP";
  run.pause_note = "the workload has no pause handler: stopped with SIGSTOP";
  PrecopyReport r;
  r.pause_s = 0.0012;
  EXPECT_THAT(SourceTable(run, r),
              HasSubstr("attached         pid 42 at /run/w.sock; paused by "
                        "SIGSTOP in 1.2 ms (the workload has no pause "
                        "handler: stopped with SIGSTOP)"));
  const nlohmann::json j = nlohmann::json::parse(SourceJson(run, r, ""));
  EXPECT_EQ(j["attached"]["pause_method"], "SIGSTOP");
  EXPECT_DOUBLE_EQ(j["attached"]["pause_s"].get<double>(), 0.0012);
  // Without --attach there is no such entry.
  EXPECT_FALSE(nlohmann::json::parse(SourceJson(RunDescription{}, r, ""))
                   .contains("attached"));
}

TEST(MigrateReport, AnAttachedWorkloadNeverPausedOrGoneIsNotClaimedRunning) {
  RunDescription run;
  run.attached = "pid 42 at /run/w.sock";
  PrecopyReport r;
  r.status = absl::FailedPreconditionError("the workload's writes: gone");
  const std::string t = SourceTable(run, r);
  EXPECT_THAT(t, HasSubstr("pid 42 at /run/w.sock; never paused"));
  EXPECT_THAT(t, HasSubstr("not running on the source (paused, stopped or "
                           "gone)"));
}

TEST(MigrateReport, AFailedAttachedMigrationSaysTheWorkloadResumed) {
  RunDescription run;
  run.attached = "pid 42 at /run/w.sock";
  PrecopyReport r;
  r.status = absl::UnavailableError("connection reset");
  r.workload_running_after = true;
  EXPECT_THAT(SourceTable(run, r), HasSubstr("resumed on the source"));
}

TEST(MigrateReport, TheDestinationSaysWhereItHandedTheMemory) {
  DestinationReport d;
  d.exported_to = "/run/in.sock";
  d.handed_over = true;
  d.handover_s = 0.0005;
  EXPECT_THAT(DestinationTable(d),
              HasSubstr("handed over to /run/in.sock in 0.5 ms"));
  const nlohmann::json j = nlohmann::json::parse(DestinationJson(d));
  EXPECT_EQ(j["export"]["handed_over"], true);
  EXPECT_FALSE(nlohmann::json::parse(DestinationJson(DestinationReport{}))
                   .contains("export"));
}

TEST(MigrateReport, TheCapIsTheOneInForceAndSaysWhenASetChangedIt) {
  RunDescription run;
  run.max_bandwidth = 50'000'000;  // set by a control client
  run.max_bandwidth_flag = 5'000'000;
  const std::string j = SourceJson(run, PrecopyReport{}, "");
  EXPECT_THAT(j, HasSubstr(R"("max_bandwidth_bytes_per_s":50000000,)"
                           R"("max_bandwidth_flag_bytes_per_s":5000000)"));
  EXPECT_THAT(SourceTable(run, PrecopyReport{}),
              HasSubstr("set by a control client"));
  run.max_bandwidth = 0;  // lifted
  EXPECT_THAT(SourceTable(run, PrecopyReport{}),
              HasSubstr("bandwidth cap    none over all channels (set by a "
                        "control client"));
  run.max_bandwidth = run.max_bandwidth_flag;
  EXPECT_THAT(SourceTable(run, PrecopyReport{}),
              Not(HasSubstr("control client")));
}

}  // namespace
}  // namespace ramferry::migrate
