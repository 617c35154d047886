#include "tools/migrate/precopy.h"

#include <atomic>
#include <bit>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "ramferry/region.h"
#include "ramferry/sender.h"
#include "tools/common/cli.h"
#include "tools/migrate/link_rate.h"

namespace ramferry::migrate {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// What the progress line shows, published by the migration thread.
struct LiveState {
  std::atomic<uint64_t> round{0};
  std::atomic<uint64_t> round_pages{0};
  std::atomic<uint64_t> pages_before_round{0};
  std::atomic<uint64_t> dirty_rate_bits{0};  // double, bit-cast
  std::atomic<uint64_t> estimate_bits{0};    // double, bit-cast
  std::atomic<bool> final_round{false};

  static uint64_t Bits(double d) { return std::bit_cast<uint64_t>(d); }
  static double Value(const std::atomic<uint64_t>& a) {
    return std::bit_cast<double>(a.load());
  }
};

// Redraws the progress line while a migration runs.
class ProgressThread {
 public:
  ProgressThread(bool enabled, const Sender* sender, const LiveState* state)
      : line_(enabled, 1.0) {
    if (!enabled) return;
    thread_ = std::thread([this, sender, state] { Run(*sender, *state); });
  }
  ~ProgressThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    line_.Done();
  }

 private:
  void Run(const Sender& sender, const LiveState& s) {
    uint64_t last_bytes = sender.stats().Total().payload_bytes;
    absl::Time last = absl::Now();
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(250),
                         [&] { return stop_; })) {
      const ChannelStats t = sender.stats().Total();
      const absl::Time now = absl::Now();
      const double gbps =
          (t.payload_bytes - last_bytes) / Seconds(now - last) / 1e9;
      last_bytes = t.payload_bytes;
      last = now;
      const uint64_t total = s.round_pages.load();
      const uint64_t done =
          std::min(total, t.pages - s.pages_before_round.load());
      line_.Update(absl::StrFormat(
          "round %d%s  %3.0f%% of %s  %.2f GB/s  dirty %s/s  est. final "
          "round %.0f ms",
          s.round.load(), s.final_round.load() ? " (final)" : "",
          total ? 100.0 * done / total : 100.0,
          cli::FormatBytes(total * kPageSize), gbps,
          cli::FormatBytes(
              static_cast<uint64_t>(LiveState::Value(s.dirty_rate_bits)) *
              kPageSize),
          LiveState::Value(s.estimate_bits) * 1e3));
    }
  }

  cli::ProgressLine line_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
};

// Whether the workload still writes: its counter moves within a while.
bool StillWriting(const Memload& load) {
  const uint64_t before = load.pages_written();
  for (int i = 0; i < 20; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    if (load.pages_written() != before) return true;
  }
  return false;
}

}  // namespace

PrecopyReport RunPrecopy(const PrecopyConfig& config, const Region& region,
                         DirtyTracker& tracker, Memload& load) {
  PrecopyReport report;
  const absl::Time start = absl::Now();
  bool paused = false;
  // Every exit path ends here: on failure the source keeps its workload.
  auto finish = [&](absl::Status status) {
    report.status = std::move(status);
    report.total_s = Seconds(absl::Now() - start);
    if (!report.status.ok() && paused) load.Resume();
    report.workload_running_after = load.running() && StillWriting(load);
    report.workload_pages_written = load.pages_written();
    return report;
  };

  absl::StatusOr<std::unique_ptr<Sender>> connected =
      Sender::Connect(config.session, {&region, 1});
  report.setup_s = Seconds(absl::Now() - start);
  if (!connected.ok()) return finish(connected.status());
  Sender& sender = **connected;
  for (const std::string& w : sender.warnings()) {
    std::fprintf(stderr, "ramferry-migrate: warning: %s\n", w.c_str());
  }
  auto record_session = [&] {
    report.stats = sender.stats();
    report.confirmed_rounds = sender.confirmed_rounds();
  };

  DirtyBitmap dirty(region.page_count());
  DirtyBitmap* bitmaps[] = {&dirty};
  // Round 0 sends everything, so writes so far need not be tracked.
  if (absl::StatusOr<uint64_t> c = tracker.Collect(dirty); !c.ok()) {
    return finish(c.status());
  }
  dirty.SetAll();

  LiveState live;
  const absl::Time transfer_start = absl::Now();
  absl::Time last_collect = transfer_start;
  LinkRate link;
  uint64_t dirty_pages_seen = 0;
  double dirty_seconds = 0;
  {
    ProgressThread progress(config.progress, &sender, &live);
    auto send_round = [&](bool final) -> absl::Status {
      live.round.store(report.rounds.size());
      live.round_pages.store(dirty.Count());
      live.pages_before_round.store(sender.stats().Total().pages);
      live.final_round.store(final);
      absl::StatusOr<RoundResult> r = sender.SendRound(bitmaps);
      if (!r.ok()) return r.status();
      const double s = absl::ToDoubleSeconds(r->elapsed);
      report.rounds.push_back({r->pages, r->bytes, s, final});
      report.bytes_sent += r->bytes;
      link.AddRound(r->bytes, s);
      return absl::OkStatus();
    };

    while (true) {
      if (absl::Status s = send_round(false); !s.ok()) {
        record_session();
        return finish(s);
      }
      const absl::Time collect_start = absl::Now();
      absl::StatusOr<uint64_t> collected = tracker.Collect(dirty);
      if (!collected.ok()) {
        record_session();
        return finish(collected.status());
      }
      const absl::Time now = absl::Now();
      // The wire idles while this runs, between one round's confirmation
      // and the next one's first packet.
      report.collect_s += Seconds(now - collect_start);
      dirty_pages_seen += *collected;
      dirty_seconds += Seconds(now - last_collect);
      last_collect = now;
      const double rate =
          dirty_seconds > 0 ? dirty_pages_seen / dirty_seconds : 0;
      const uint64_t pending = dirty.Count();
      const std::optional<double> estimate =
          link.SecondsFor(pending, kPageSize);
      report.estimated_final_s = estimate.value_or(0);
      live.dirty_rate_bits.store(LiveState::Bits(rate));
      live.estimate_bits.store(LiveState::Bits(report.estimated_final_s));
      if (estimate &&
          *estimate <= absl::ToDoubleSeconds(config.downtime_limit)) {
        report.converged_by = "downtime-limit";
        break;
      }
      if (report.rounds.size() >= config.max_rounds) {
        report.converged_by = "max-rounds";
        break;
      }
    }
    report.dirty_pages_per_s =
        dirty_seconds > 0 ? dirty_pages_seen / dirty_seconds : 0;

    // Stop and copy: nothing writes from here, so the last collect is
    // complete and the final round leaves the destination identical.
    const absl::Time pause = absl::Now();
    load.Pause();
    paused = true;
    // Memory is frozen from here: the check's hashing may start now, on
    // idle CPU only, beside the final round.
    if (config.verify) {
      if (absl::Status v = sender.StartVerify(); !v.ok()) {
        record_session();
        return finish(v);
      }
    }
    absl::Status s = tracker.Collect(dirty).status();
    report.final_collect_s = Seconds(absl::Now() - pause);
    if (s.ok()) s = send_round(true);
    report.transfer_s = Seconds(absl::Now() - transfer_start);
    // Switchover: the destination confirmed the final round.
    report.downtime_s = Seconds(absl::Now() - pause);
    if (!report.rounds.empty() && report.rounds.back().final) {
      report.final_round_s = report.rounds.back().seconds;
    }
    if (!s.ok()) {
      record_session();
      return finish(s);
    }
    if (config.verify) {
      // The destination answers from the digests it took as pages landed,
      // so it need not wait for this; the source stays paused until the
      // check is done (it may have to resume).
      const absl::Time verify_start = absl::Now();
      absl::StatusOr<VerifyReport> v = sender.Verify();
      report.verify_s = Seconds(absl::Now() - verify_start);
      if (!v.ok()) {
        record_session();
        return finish(v.status());
      }
      report.pages_verified = v->pages_checked;
      report.pages_mismatched = v->pages_mismatched;
      report.verified = v->ok() && v->pages_checked == region.page_count();
      if (!report.verified) {
        absl::Status bad = absl::DataLossError(absl::StrFormat(
            "verification failed: %d of %d pages differ (first: page %d)",
            v->pages_mismatched, v->pages_checked,
            v->first_mismatches.empty() ? 0 : v->first_mismatches[0].second));
        sender.Abort(bad);
        record_session();
        return finish(bad);
      }
    }
  }
  report.bytes_resent =
      report.bytes_sent - std::min<uint64_t>(report.bytes_sent, region.length);
  absl::Status done = sender.Finish();
  record_session();
  if (done.ok()) load.Stop();  // the destination owns the memory now
  return finish(done);
}

}  // namespace ramferry::migrate
