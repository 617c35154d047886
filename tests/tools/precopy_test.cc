// Live migration in one process: a real Receiver, a real Sender driven by
// the pre-copy loop, a workload writing all along, real dirty tracking.
#include "tools/migrate/precopy.h"

#include <future>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/receiver.h"
#include "tests/support/faulty_transport.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/transport_selection.h"
#include "tests/support/uffd_skip.h"
#include "tools/migrate/destination.h"
#include "tools/migrate/live_control.h"
#include "tools/migrate/memload.h"
#include "tools/migrate/switchover_estimate.h"

namespace ramferry::migrate {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

using testing::MakeRegion;
using testing::SameBytes;
using testing::ScaledBytes;
using testing::ServingReceiver;

struct Migration {
  PrecopyReport report;
  bool identical = false;
  absl::Status destination;
  uint64_t destination_verified = 0;
};

Migration Migrate(TransportKind kind, bool uffd, uint64_t bytes,
                  const Memload::Options& load_options, PrecopyConfig config) {
  auto src = MakeRegion(1, bytes, 21, true);
  auto dst = MakeRegion(1, bytes);
  config.session.transport = kind;
  // Keyed, as the tool runs: the stream is sealed (mac) while memload
  // writes the pages being sealed.
  config.session.auth_key = "precopy-test-key-0123456789abcdef";
  config.progress = false;
  ServingReceiver rx(config.session, {dst.region});
  config.session.port = rx.port();
  std::unique_ptr<DirtyTracker> tracker =
      uffd ? *MakeUffdWpTracker(src.region.base, bytes)
           : MakeBitmapTracker(src.region.page_count());
  Memload load(static_cast<uint8_t*>(src.region.base), src.region.page_count(),
               load_options, tracker.get());
  load.Start();
  Migration run;
  run.report = RunPrecopy(config, src.region, *tracker, load);
  run.destination = rx.result();
  run.destination_verified = rx.receiver().verified_pages();
  load.Stop();
  run.identical = SameBytes(src.region, dst.region);
  return run;
}

class ConvergeTest
    : public ::testing::TestWithParam<std::tuple<TransportKind, bool>> {};

TEST_P(ConvergeTest, ModestDirtyRateConvergesAndVerifies) {
  const auto [kind, uffd] = GetParam();
  const uint64_t bytes = ScaledBytes(256ull << 20);
  Memload::Options load;
  load.dirty_set_pages = (16 << 20) / 4096;
  load.pages_per_second = (32 << 20) / 4096;
  Migration run = Migrate(kind, uffd, bytes, load, PrecopyConfig{});
  const PrecopyReport& r = run.report;
  ASSERT_OK(r.status);
  EXPECT_TRUE(r.verified);
  EXPECT_EQ(r.pages_verified, bytes / 4096);
  EXPECT_EQ(r.pages_mismatched, 0u);
  EXPECT_TRUE(run.identical);
  EXPECT_OK(run.destination);
  EXPECT_EQ(run.destination_verified, bytes / 4096);
  EXPECT_EQ(r.converged_by, "downtime-limit");
  ASSERT_GE(r.rounds.size(), 2u);
  EXPECT_EQ(r.rounds.front().pages, bytes / 4096);
  EXPECT_TRUE(r.rounds.back().final);
  EXPECT_EQ(r.confirmed_rounds, r.rounds.size());
  EXPECT_GT(r.downtime_s, 0);
  // The downtime ends at the switchover (final round confirmed); it holds
  // the last collection and the final round. Verification follows it.
  EXPECT_GE(r.downtime_s, r.final_round_s + r.final_collect_s);
  EXPECT_GT(r.final_round_s, 0);
  EXPECT_GT(r.verify_s, 0);
  EXPECT_GT(r.workload_pages_written, 0u);
  EXPECT_FALSE(r.workload_running_after);  // the destination owns it now
  EXPECT_EQ(r.bytes_sent, r.bytes_resent + bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Transports, ConvergeTest,
    ::testing::Combine(::testing::Values(TransportKind::kTcp,
                                         TransportKind::kTcpZeroCopy),
                       ::testing::Values(true, false)),
    [](const auto& info) {
      return absl::StrCat(testing::TestName(std::get<0>(info.param)),
                          std::get<1>(info.param) ? "_uffd" : "_bitmap");
    });

// A workload whose pause takes `delay` to hold (a slow pause handler).
class SlowPause : public Workload {
 public:
  // `before_pause` (null: nothing) runs as each pause begins.
  SlowPause(Workload& inner, absl::Duration delay,
            std::function<void()> before_pause = nullptr)
      : inner_(inner), delay_(delay), before_pause_(std::move(before_pause)) {}
  absl::Status Pause() override {
    ++pauses;
    if (before_pause_) before_pause_();
    absl::SleepFor(delay_);
    return inner_.Pause();
  }
  void Resume() override {
    ++resumes;
    inner_.Resume();
  }
  void Stop() override { inner_.Stop(); }
  bool can_throttle() const override { return inner_.can_throttle(); }
  void SetThrottle(int percent) override { inner_.SetThrottle(percent); }
  std::optional<uint64_t> pages_written() const override {
    return inner_.pages_written();
  }
  bool running() const override { return inner_.running(); }
  int pauses = 0;
  int resumes = 0;

 private:
  Workload& inner_;
  absl::Duration delay_;
  std::function<void()> before_pause_;
};

// Writes one byte in each of the first `pages` pages and marks them, as
// the workload would: a burst the final round holds whatever rate the
// workload itself reaches on a loaded machine. Not instrumented for TSan,
// like the workload's writers.
__attribute__((no_sanitize("thread"))) void Burst(const Region& r,
                                                  DirtyTracker& tracker,
                                                  uint64_t pages) {
  auto* base = static_cast<volatile uint8_t*>(r.base);
  for (uint64_t p = 0; p < pages && p < r.page_count(); ++p) {
    base[p * r.page_size] = static_cast<uint8_t>(base[p * r.page_size] + 1);
    tracker.MarkWritten(p);
  }
}

// 64 MiB migrated while memload writes `dirty_mib` MiB/s into a set of
// `set_mib` MiB and its pause takes 150 ms to hold, with no stall
// detection (it could stop pre-copy before the first pause).
struct SlowPauseRun {
  // `burst_pages`: written at each pause's start (Burst).
  SlowPauseRun(absl::Duration limit, int max_rounds, uint64_t set_mib,
               uint64_t dirty_mib, uint64_t burst_pages = 0) {
    const uint64_t bytes = ScaledBytes(64ull << 20);
    auto src = MakeRegion(1, bytes, 21, true);
    auto dst = MakeRegion(1, bytes);
    PrecopyConfig config;
    config.progress = false;
    config.convergence.downtime_limit = limit;
    config.convergence.stall_rounds = 0;
    config.convergence.max_rounds = max_rounds;
    config.session.auth_key = "precopy-test-key-0123456789abcdef";
    ServingReceiver rx(config.session, {dst.region});
    config.session.port = rx.port();
    std::unique_ptr<DirtyTracker> tracker =
        MakeBitmapTracker(src.region.page_count());
    Memload::Options options;
    options.dirty_set_pages = (set_mib << 20) / 4096;
    options.pages_per_second = (dirty_mib << 20) / 4096;
    Memload load(static_cast<uint8_t*>(src.region.base),
                 src.region.page_count(), options, tracker.get());
    load.Start();
    SlowPause slow(load, absl::Milliseconds(150), [&] {
      if (burst_pages != 0) Burst(src.region, *tracker, burst_pages);
    });
    report = RunPrecopy(config, src.region, *tracker, slow);
    load.Stop();
    pauses = slow.pauses;
    resumes = slow.resumes;
    identical = SameBytes(src.region, dst.region);
    destination = rx.result();
  }
  PrecopyReport report;
  int pauses = 0;
  int resumes = 0;
  bool identical = false;
  absl::Status destination;
};

TEST(Precopy, AStopThatWouldNotFitOncePausedResumesTheWorkload) {
  // The live rounds see a final round that fits 50 ms; the pause alone
  // takes 150 ms. Paused and collected, the switchover is given up and
  // the workload resumes; every estimate from then on counts the pause,
  // so no estimate fits again and pre-copy ends by its round limit.
  const SlowPauseRun run(absl::Milliseconds(50), 12, 1, 4);
  const PrecopyReport& r = run.report;
  ASSERT_OK(r.status);
  EXPECT_EQ(r.switchovers_resumed, 1);
  EXPECT_EQ(run.resumes, 1);
  EXPECT_EQ(run.pauses, 2);
  EXPECT_GE(r.resumed_stall_s, 0.150);
  EXPECT_EQ(r.converged_by, "max-rounds");
  // Any estimate after the resume counts the pause (0: none was given,
  // the final round too small against the measured ones).
  if (r.estimated_downtime_s != 0) {
    EXPECT_GE(r.estimated_downtime_s, 0.150);
  }
  EXPECT_TRUE(r.verified);
  EXPECT_TRUE(run.identical);
  EXPECT_OK(run.destination);
}

TEST(Precopy, AProbedFinalRoundThatWouldNotFitResumesAndStaysExact) {
  // The pause takes 150 ms while the workload writes 8 MiB/s, and 4.3 MiB
  // (1100 pages) are written as it begins, so that the final round does
  // not hang on what the workload manages on a loaded machine (seen: less
  // than 4 MiB, and no probe). Paused, the final round is over 4 MiB and
  // the estimate within 3x the 100 ms limit (a margin a loaded machine's
  // rate estimate needs), so its first quarter goes as a probe; with the
  // pause counted it does not fit and the workload resumes. The probe's
  // pages were sent and are clean: those written after the resume go
  // again, and the destination ends identical.
  const SlowPauseRun run(absl::Milliseconds(100), 8, 16, 8, 1100);
  const PrecopyReport& r = run.report;
  ASSERT_OK(r.status);
  EXPECT_GE(r.switchovers_resumed, 1);
  // A paused round (the probe) that live rounds followed.
  bool probe_then_live = false;
  for (size_t i = 0; i + 1 < r.rounds.size(); ++i) {
    probe_then_live |= r.rounds[i].final && !r.rounds[i + 1].final;
  }
  EXPECT_TRUE(probe_then_live);
  EXPECT_TRUE(r.verified);
  EXPECT_EQ(r.pages_mismatched, 0u);
  EXPECT_TRUE(run.identical);
  EXPECT_OK(run.destination);
}

// 128 MiB while memload writes 32 MiB at 1 GiB/s, stopped by a limit of
// `live_rounds` live rounds: no estimate fits a negative limit, not even an
// empty round's, so the rounds run out first, whatever the workload
// managed to write.
Migration MigrateUntilTheRoundLimit(int live_rounds = 2) {
  Memload::Options load;
  load.dirty_set_pages = (32 << 20) / 4096;
  load.pages_per_second = (1ull << 30) / 4096;
  PrecopyConfig config;
  config.convergence.downtime_limit = -absl::Nanoseconds(1);
  config.convergence.max_rounds = live_rounds;
  return Migrate(TransportKind::kTcp, true, ScaledBytes(128ull << 20), load,
                 config);
}

TEST(Precopy, AFinalRoundOf4MiBOrMoreIsProbedFirst) {
  // The final round is large, and its first quarter goes as a round of
  // its own. One live round: the final one holds what the workload wrote
  // during the whole of round 0 (its 32 MiB set, or at least 4 MiB at any
  // rate above 8 MiB/s), not what it managed in a short second round
  // (seen: 2 MiB where write-protect faults are slow).
  Migration run = MigrateUntilTheRoundLimit(1);
  const PrecopyReport& r = run.report;
  ASSERT_OK(r.status);
  ASSERT_EQ(r.rounds.size(), 3u);  // 1 live, the probe, the rest
  const uint64_t final_pages = r.rounds[1].pages + r.rounds[2].pages;
  ASSERT_GE(final_pages * 4096, SwitchoverEstimate::kProbeFromBytes);
  EXPECT_FALSE(r.rounds[0].final);
  EXPECT_TRUE(r.rounds[1].final);
  EXPECT_TRUE(r.rounds[2].final);
  EXPECT_EQ(r.final_probe_pages, r.rounds[1].pages);
  // A quarter, in whole bitmap words.
  EXPECT_GE(r.final_probe_pages, final_pages / 4);
  EXPECT_LT(r.final_probe_pages, final_pages / 4 + 64);
  EXPECT_DOUBLE_EQ(r.final_round_s, r.rounds[1].seconds + r.rounds[2].seconds);
  EXPECT_GE(r.downtime_s, r.final_round_s + r.final_collect_s);
  EXPECT_TRUE(r.verified);
  EXPECT_TRUE(run.identical);
}

TEST(Precopy, StopsAfterMaxRoundsAndStillVerifies) {
  Migration run = MigrateUntilTheRoundLimit();
  ASSERT_OK(run.report.status);
  EXPECT_EQ(run.report.converged_by, "max-rounds");
  // 2 live + the final one (a first quarter probed where it is large).
  EXPECT_EQ(run.report.rounds.size(),
            run.report.final_probe_pages > 0 ? 4u : 3u);
  EXPECT_TRUE(run.report.verified);
  EXPECT_TRUE(run.identical);
}

TEST(Precopy, ChannelLostWhileTheWorkloadWritesStillVerifies) {
  // One of 4 channels reset in round 0 while the workload keeps dirtying
  // pages: the pre-copy goes on over the other 3, and the final round and
  // verification leave the destination identical to the source.
  testing::FaultInjector faults({.source = true,
                                 .op = testing::FaultOp::kSendPacket,
                                 .nth = 40,
                                 .kind = testing::FaultKind::kReset});
  Memload::Options load;
  load.dirty_set_pages = (4 << 20) / 4096;
  load.pages_per_second = (16 << 20) / 4096;
  PrecopyConfig config;
  config.session.channels = 4;
  config.session.packet_pages = 32;
  config.session.survive_channel_loss = true;
  config.convergence.max_rounds = 4;
  Migration run =
      Migrate(TransportKind::kTcp, false, 32ull << 20, load, config);
  ASSERT_TRUE(faults.fired());
  ASSERT_OK(run.report.status);
  ASSERT_OK(run.destination);
  EXPECT_GE(run.report.rounds.size(), 2u);
  EXPECT_TRUE(run.report.verified);
  EXPECT_TRUE(run.identical);
  ASSERT_EQ(run.report.stats.channels_lost.size(), 1u);
  EXPECT_EQ(run.report.stats.channels_lost[0].channel, faults.fired_channel());
  EXPECT_EQ(run.report.stats.channels_lost[0].round, 0u);
  EXPECT_GT(run.report.stats.resent_pages, 0u);
}

TEST(Precopy, UnreachableDestinationFailsCleanlyAndTheWorkloadRuns) {
  auto src = MakeRegion(1, 8 << 20, 22, true);
  auto tracker = MakeBitmapTracker(src.region.page_count());
  Memload::Options lo{.dirty_set_pages = 64, .pages_per_second = 10000};
  Memload load(static_cast<uint8_t*>(src.region.base), src.region.page_count(),
               lo, tracker.get());
  load.Start();
  PrecopyConfig config;
  config.session.insecure = true;
  config.session.port = 1;  // nobody listens
  config.session.connect_timeout = absl::Milliseconds(200);
  config.progress = false;
  PrecopyReport r = RunPrecopy(config, src.region, *tracker, load);
  EXPECT_THAT(r.status, StatusIs(absl::StatusCode::kUnavailable,
                                 HasSubstr("Connection refused")));
  EXPECT_EQ(r.confirmed_rounds, 0u);
  EXPECT_TRUE(r.workload_running_after);
  EXPECT_FALSE(r.verified);
}

// Audit 3, F4: the destination refuses FINISH at its commit point (its
// commit hook, where ramferry-migrate's destination takes a cancel that
// came first). The source learns that it did not commit: the workload
// resumes and the report says the destination refused, where before it
// said the outcome was unknown and kept the workload paused, while the
// destination discarded the memory.
TEST(Precopy, TheDestinationsRefusalAtFinishResumesTheWorkload) {
  const uint64_t bytes = 8 << 20;
  auto src = MakeRegion(1, bytes, 23, true);
  auto dst = MakeRegion(1, bytes);
  PrecopyConfig config;
  config.session.auth_key = "precopy-test-key-0123456789abcdef";
  config.progress = false;
  absl::StatusOr<std::unique_ptr<Receiver>> rx =
      Receiver::Listen(config.session, {&dst.region, 1});
  ASSERT_OK(rx);
  (*rx)->OnCommit([] {
    return absl::CancelledError("cancelled on the destination by the test");
  });
  config.session.port = (*rx)->port();
  Receiver* receiver = rx->get();
  std::future<absl::Status> served =
      std::async(std::launch::async, [receiver] { return receiver->Serve(); });
  auto tracker = MakeBitmapTracker(src.region.page_count());
  Memload::Options lo{.dirty_set_pages = 64, .pages_per_second = 10000};
  Memload load(static_cast<uint8_t*>(src.region.base), src.region.page_count(),
               lo, tracker.get());
  load.Start();
  const PrecopyReport r = RunPrecopy(config, src.region, *tracker, load);
  const absl::Status destination = served.get();
  load.Stop();
  EXPECT_THAT(r.status,
              StatusIs(absl::StatusCode::kCancelled,
                       HasSubstr("cancelled on the destination by the test")));
  EXPECT_THAT(std::string(r.status.message()),
              ::testing::HasSubstr("cancelled on the destination by the test"));
  EXPECT_TRUE(r.destination_refused) << r.status;
  EXPECT_FALSE(r.outcome_unknown) << r.status;
  EXPECT_FALSE(r.workload_kept_paused);
  EXPECT_TRUE(r.workload_running_after);
  EXPECT_TRUE(absl::IsCancelled(destination)) << destination;
}

// Audit 3, F10 (and F4 at the switch): a cancel on the destination that
// lands while the source is switching to post-copy (here: as the source
// pauses its workload, before its MISSING_PAGES). The destination's
// post-copy hook starts nothing (no workload, never armed), and the
// source, whose switch had begun, learns that the destination did not
// commit and resumes its workload, where before it kept it paused for
// good while the destination discarded the memory.
TEST(Precopy, ADestinationCancelAtTheSwitchStartsNothingAndResumesTheSource) {
  SKIP_WITHOUT_USERFAULTFD();
  const uint64_t bytes = 8 << 20;
  auto src = MakeRegion(1, bytes, 24, true);
  auto dst = MakeRegion(1, bytes);
  SessionOptions options;
  options.auth_key = "precopy-test-key-0123456789abcdef";
  options.postcopy = true;
  options.stall_timeout = absl::Seconds(5);
  LiveControl dest_control(LiveControl::Role::kDestination, {}, {});
  std::promise<uint16_t> port;
  std::future<DestinationReport> destination =
      std::async(std::launch::async, [&] {
        return RunDestination(
            options, {&dst.region, 1}, Prefault::kOff, /*progress=*/false,
            [&port](uint16_t p) { port.set_value(p); },
            Memload::Options{.dirty_set_pages = 64, .pages_per_second = 10000},
            &dest_control);
      });
  PrecopyConfig config;
  config.session = options;
  config.session.port = port.get_future().get();
  config.progress = false;
  config.postcopy = PostcopyMode::kNow;
  LiveControl src_control(LiveControl::Role::kSource, {}, {.postcopy = true});
  absl::StatusOr<Json> cancelled;
  src_control.OnEvent([&](absl::string_view event, const Json&) {
    if (event != "paused") return;
    cancelled = dest_control.Handle(
        "cancel", Json{{"cmd", "cancel"}, {"reason", "test at the switch"}});
  });
  config.control = &src_control;
  auto tracker = MakeBitmapTracker(src.region.page_count());
  Memload::Options lo{.dirty_set_pages = 64, .pages_per_second = 10000};
  Memload load(static_cast<uint8_t*>(src.region.base), src.region.page_count(),
               lo, tracker.get());
  load.Start();
  const PrecopyReport r = RunPrecopy(config, src.region, *tracker, load);
  const DestinationReport d = destination.get();
  load.Stop();
  ASSERT_OK(cancelled);
  // The destination: cancelled, never armed, its workload never started.
  EXPECT_TRUE(absl::IsCancelled(d.status)) << d.status;
  EXPECT_FALSE(d.postcopy_armed);
  EXPECT_EQ(d.workload_pages_written, 0u);
  EXPECT_EQ(dest_control.state(), MigrationState::kCancelled);
  // The source: told the destination did not commit, its workload runs.
  EXPECT_THAT(r.status,
              StatusIs(absl::StatusCode::kCancelled,
                       HasSubstr("migration cancelled by a control client")));
  EXPECT_THAT(std::string(r.status.message()),
              ::testing::HasSubstr("test at the switch"));
  EXPECT_TRUE(r.destination_refused) << r.status;
  EXPECT_TRUE(r.cancelled) << r.status;  // a cancel, on either end
  EXPECT_FALSE(r.workload_kept_paused) << r.status;
  EXPECT_TRUE(r.workload_running_after);
}

// What never converges: a dirty set rewritten faster than any estimate
// fits (a negative limit fits nothing).
PrecopyConfig NeverFits() {
  PrecopyConfig config;
  config.convergence.downtime_limit = -absl::Nanoseconds(1);
  config.convergence.stall_rounds = 0;
  return config;
}

Memload::Options Rewriting(uint64_t set_bytes) {
  return {.dirty_set_pages = set_bytes / 4096,
          .pages_per_second = (256ull << 20) / 4096};
}

TEST(Precopy, MaxBandwidthCapsEveryRound) {
  // 8 MiB at 16 MB/s: round 0 alone takes half a second less one burst,
  // however fast loopback is.
  PrecopyConfig config;
  config.session.max_bandwidth = 16'000'000;
  Migration run =
      Migrate(TransportKind::kTcp, true, 8 << 20, Memload::Options{}, config);
  ASSERT_OK(run.report.status);
  EXPECT_TRUE(run.identical);
  ASSERT_FALSE(run.report.rounds.empty());
  EXPECT_GE(run.report.rounds.front().seconds, 0.5 - 0.02);
  // The estimate sees the capped link, not loopback.
  EXPECT_LT(run.report.link_bytes_per_s, 16e6 * 1.1);
}

TEST(Precopy, TimeoutCancelsMidRoundAndTheSourceRunsOn) {
  // Round 0 needs 2 s at 32 MB/s; the timeout cancels it where it stands.
  PrecopyConfig config = NeverFits();
  config.session.max_bandwidth = 32'000'000;
  config.convergence.timeout = absl::Milliseconds(300);
  config.convergence.on_timeout = OnTimeout::kCancel;
  Migration run =
      Migrate(TransportKind::kTcp, true, 64 << 20, Rewriting(1 << 20), config);
  const PrecopyReport& r = run.report;
  EXPECT_EQ(r.status.code(), absl::StatusCode::kCancelled) << r.status;
  EXPECT_THAT(std::string(r.status.message()),
              ::testing::HasSubstr("destination discards"));
  EXPECT_TRUE(r.cancelled);
  EXPECT_EQ(r.converged_by, "timeout");
  EXPECT_TRUE(r.rounds.empty()) << "round 0 finished before the timeout";
  EXPECT_EQ(r.confirmed_rounds, 0u);
  EXPECT_TRUE(r.workload_running_after);
  EXPECT_FALSE(r.verified);
  // The destination was told, and ends with an error, not a session.
  EXPECT_THAT(run.destination,
              StatusIs(absl::StatusCode::kCancelled,
                       HasSubstr("before pre-copy converged")));
}

TEST(Precopy, TimeoutWithForceStopsAndCopies) {
  PrecopyConfig config = NeverFits();
  config.convergence.timeout = absl::Milliseconds(300);
  config.convergence.on_timeout = OnTimeout::kForce;
  config.convergence.max_rounds = 1'000'000;  // the timeout comes first
  Migration run =
      Migrate(TransportKind::kTcp, true, 16 << 20, Rewriting(2 << 20), config);
  const PrecopyReport& r = run.report;
  ASSERT_OK(r.status);
  EXPECT_EQ(r.converged_by, "timeout");
  EXPECT_FALSE(r.cancelled);
  EXPECT_TRUE(r.verified);
  EXPECT_TRUE(run.identical);
  EXPECT_TRUE(r.rounds.back().final);
}

TEST(Precopy, AStalledPrecopyStopsAtItsLowestPoint) {
  // 64 pages rewritten 65536 times a second, rounds of at least 30 ms:
  // every round leaves the whole set dirty, so the remaining bytes never
  // fall below round 1's and every round is at the lowest point.
  PrecopyConfig config = NeverFits();
  config.convergence.stall_rounds = 2;
  config.session.max_bandwidth = 8'000'000;
  Migration run =
      Migrate(TransportKind::kTcp, true, 4 << 20, Rewriting(256 << 10), config);
  const PrecopyReport& r = run.report;
  ASSERT_OK(r.status);
  EXPECT_TRUE(r.verified);
  EXPECT_TRUE(run.identical);
  if (!testing::UnderSanitizer()) {
    // A sanitizer's writer may be too slow to keep the whole set dirty.
    EXPECT_EQ(r.converged_by, "stall");
    EXPECT_TRUE(r.stalled);
    EXPECT_LT(r.rounds.size(), 30u);
    ASSERT_GE(r.rounds.size(), 2u);
    const RoundRecord& last_live = r.rounds[r.rounds.size() - 2];
    EXPECT_LE(last_live.remaining_bytes,
              r.lowest_remaining_bytes * (1 + ConvergencePolicy::kProgress));
  }
}

TEST(Precopy, AutoConvergeThrottlesAWorkloadThatOutrunsTheLink) {
  // 4 MB/s of link against a 2 MiB set rewritten at 256 MiB/s: the
  // workload dirties far more than half of what the link carries.
  PrecopyConfig config = NeverFits();
  config.convergence.auto_converge = true;
  config.convergence.max_rounds = 6;
  config.session.max_bandwidth = 4'000'000;
  Migration run =
      Migrate(TransportKind::kTcp, true, 4 << 20, Rewriting(2 << 20), config);
  const PrecopyReport& r = run.report;
  ASSERT_OK(r.status);
  EXPECT_TRUE(r.verified);
  EXPECT_TRUE(run.identical);
  EXPECT_EQ(r.converged_by, "max-rounds");
  int last = 0;
  for (const RoundRecord& round : r.rounds) {
    if (round.final) continue;
    EXPECT_GE(round.throttle_percent, last) << "the throttle only rises";
    last = round.throttle_percent;
  }
  if (!testing::UnderSanitizer()) {
    EXPECT_GE(r.throttle_percent, 30);  // steps after rounds 2 and 4
  }
}

}  // namespace
}  // namespace ramferry::migrate
