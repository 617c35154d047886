#include "tools/migrate/precopy.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "ramferry/region.h"
#include "ramferry/sender.h"
#include "tools/common/cli.h"
#include "tools/migrate/link_rate.h"
#include "tools/migrate/precopy_progress.h"
#include "tools/migrate/switchover_estimate.h"

namespace ramferry::migrate {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// Whether the workload still writes: its counter moves within a while.
bool StillWriting(const Workload& load) {
  const std::optional<uint64_t> before = load.pages_written();
  if (!before.has_value()) return load.running();  // not ours to count
  for (int i = 0; i < 20; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    if (load.pages_written() != before) return true;
  }
  return false;
}

// Runs `expire` on a thread of its own at `deadline` unless disarmed
// first (InfiniteFuture: never).
class Deadline {
 public:
  Deadline(absl::Time deadline, std::function<void()> expire) {
    if (deadline == absl::InfiniteFuture()) return;
    const auto until = std::chrono::steady_clock::now() +
                       absl::ToChronoNanoseconds(deadline - absl::Now());
    thread_ = std::thread([this, until, expire = std::move(expire)] {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_until(lock, until, [this] { return disarmed_; })) return;
      expired_ = true;
      expire();  // under the lock: Disarm() returns after it
    });
  }
  ~Deadline() { Disarm(); }

  // Stops the clock; true if `expire` ran.
  bool Disarm() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      disarmed_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    return expired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool disarmed_ = false;  // guarded by mu_
  bool expired_ = false;   // guarded by mu_; read after the join
  std::thread thread_;
};

// How the control clients reach `sender`: its counters, its abort and
// its bandwidth cap.
LiveControl::SessionHooks SenderHooks(Sender* sender) {
  return {
      [sender] { return sender->stats(); },
      [sender](const absl::Status& why) { sender->Abort(why); },
      [sender](uint64_t bytes_per_s) { sender->SetMaxBandwidth(bytes_per_s); }};
}

double Milliseconds(double seconds) { return seconds * 1e3; }

uint64_t PageCount(absl::Span<const Region> regions) {
  uint64_t pages = 0;
  for (const Region& r : regions) pages += r.page_count();
  return pages;
}

// One pre-copy migration as its steps. Each step returns an error that
// ends the migration; Run() records the session and the report once.
class PrecopyRun {
 public:
  PrecopyRun(const PrecopyConfig& config, absl::Span<const Region> regions,
             DirtyTracker& tracker, Workload& load)
      : config_(config),
        regions_(regions),
        region_pages_(PageCount(regions)),
        tracker_(tracker),
        load_(load),
        own_control_(LiveControl::Role::kSource,
                     {config.session.max_bandwidth, config.convergence}, {}),
        control_(config.control != nullptr ? *config.control : own_control_) {
    for (const Region& r : regions_) {
      dirty_.emplace_back(r.page_count());
      region_bytes_ += r.length;
    }
    for (DirtyBitmap& d : dirty_) dirty_ptrs_.push_back(&d);
    for (const Region& r : regions_) probe_.emplace_back(r.page_count());
    for (DirtyBitmap& d : probe_) probe_ptrs_.push_back(&d);
  }

  PrecopyReport Run() {
    report_.postcopy_mode = PostcopyModeName(config_.postcopy);
    absl::Status s = Connect();
    if (s.ok()) {
      ProgressThread progress(config_.progress, &live_);
      if (config_.postcopy == PostcopyMode::kNow) {
        s = Postcopy();  // every page missing: no round at all
      } else {
        s = LiveRoundsUntilTimeout();
        // A stop-and-copy whose final round turns out not to fit once
        // the workload is paused goes back to live rounds (or on to
        // post-copy), a bounded number of times.
        while (s.ok()) {
          if (ChooseSwitchover(config_.postcopy, stopped_with_,
                               report_.converged_by) == Switchover::kPostcopy) {
            s = Postcopy();
            break;
          }
          absl::StatusOr<SwitchoverTry> tried = StopAndCopy();
          if (!tried.ok()) {
            s = tried.status();
          } else if (*tried == SwitchoverTry::kPostcopy) {
            s = Postcopy();
          } else if (*tried == SwitchoverTry::kResumed) {
            s = LiveRoundsUntilTimeout();
            continue;
          }
          break;
        }
      }
      if (s.ok() && config_.verify) s = VerifyWhilePaused();
    }
    if (s.ok()) s = Finish();
    if (sender_ != nullptr) {
      report_.stats = sender_->stats();
      report_.confirmed_rounds = sender_->confirmed_rounds();
      const PostcopyStats& p = report_.stats.postcopy;
      report_.bytes_sent += (p.urgent_pages + p.pushed_pages) * kPageSize;
    }
    report_.bytes_resent =
        report_.bytes_sent -
        std::min<uint64_t>(report_.bytes_sent, region_bytes_);
    control_.SetSession({});
    // A cancel on either end: this one's clients, or the destination's
    // (its error, as the engine relays it).
    report_.cancelled |= !control_.cancelled().ok() || IsPeerCancel(s);
    report_.status = std::move(s);
    report_.total_s = Seconds(absl::Now() - start_);
    report_.cpu_s = cli::ProcessCpuSeconds() - cpu_start_;
    // On failure the source keeps its workload, unless the switch to
    // post-copy began or FINISH went out: the destination may have
    // resumed it already, and one copy may run, never two. Unless the
    // destination refused FINISH or the switch (its commit hook, a cancel
    // there, pages no tag vouched for): it did not commit, and said so.
    // (A switch that failed before its MISSING_PAGES left counts the same.)
    const bool refused = sender_ != nullptr && sender_->commit_outcome() ==
                                                   CommitOutcome::kNotCommitted;
    const bool committed =
        !refused &&
        (switched_ || (sender_ != nullptr && sender_->finish_sent()));
    report_.destination_refused =
        !report_.status.ok() && refused &&
        (switched_ || (sender_ != nullptr && sender_->finish_sent()));
    report_.outcome_unknown = !report_.status.ok() && !switched_ && committed;
    if (!report_.status.ok() && paused_ && !committed) load_.Resume();
    report_.workload_kept_paused = !report_.status.ok() && committed;
    report_.workload_running_after = load_.running() && StillWriting(load_);
    report_.workload_pages_written = load_.pages_written().value_or(0);
    control_.Finished(report_.status, report_.cancelled,
                      Json{{"total_s", report_.total_s},
                           {"downtime_ms", Milliseconds(report_.downtime_s)},
                           {"rounds", report_.rounds.size()},
                           {"bytes_sent", report_.bytes_sent},
                           {"switchover", report_.switchover},
                           {"verified", report_.verified}});
    return std::move(report_);
  }

 private:
  absl::Status Connect() {
    absl::StatusOr<std::unique_ptr<Sender>> connected =
        Sender::Connect(config_.session, regions_);
    report_.setup_s = Seconds(absl::Now() - start_);
    if (!connected.ok()) return connected.status();
    report_.connected = true;
    sender_ = std::move(*connected);
    live_.sender.store(sender_.get());
    control_.SetSession(SenderHooks(sender_.get()));
    control_.SetState(MigrationState::kActive);
    if (config_.memory_frozen) sender_->NoteMemoryFrozen();
    for (const std::string& w : sender_->warnings()) {
      std::fprintf(stderr, "ramferry-migrate: warning: %s\n", w.c_str());
    }
    // Round 0 sends everything, so writes so far need not be tracked.
    if (absl::StatusOr<uint64_t> c = Collect(); !c.ok()) {
      return c.status();
    }
    for (DirtyBitmap& d : dirty_) d.SetAll();
    transfer_start_ = absl::Now();
    last_collect_ = transfer_start_;
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Collect() {
    return tracker_.CollectAll(dirty_ptrs_);
  }
  uint64_t DirtyPages() const {
    uint64_t n = 0;
    for (const DirtyBitmap& d : dirty_) n += d.Count();
    return n;
  }

  // Moves the first `n` dirty pages or a few more (whole bitmap words)
  // into probe_; returns how many it moved.
  uint64_t TakeProbe(uint64_t n) {
    uint64_t taken = 0;
    for (size_t i = 0; i < dirty_.size() && taken < n; ++i) {
      for (size_t w = 0; w < dirty_[i].words() && taken < n; ++w) {
        const uint64_t bits = dirty_[i].TakeWord(w);
        probe_[i].OrWord(w, bits);
        taken += std::popcount(bits);
      }
    }
    return taken;
  }

  // Sends the pages marked in `pages` (all of dirty_, or probe_).
  absl::Status SendRound(bool final) { return SendRound(final, dirty_ptrs_); }
  absl::Status SendRound(bool final, absl::Span<DirtyBitmap* const> pages) {
    uint64_t marked = 0;
    for (const DirtyBitmap* d : pages) marked += d->Count();
    live_.round.store(report_.rounds.size());
    live_.round_pages.store(marked);
    const ChannelStats before = sender_->stats().Total();
    live_.pages_before_round.store(before.pages);
    live_.final_round.store(final);
    control_.UpdateProgress(
        {{"round", live_.round.load()},
         {"round_pages", live_.round_pages.load()},
         {"pages_before_round", live_.pages_before_round.load()},
         {"final_round", final}});
    absl::StatusOr<RoundResult> r = sender_->SendRound(pages);
    if (!r.ok()) {
      // A round cut short (a cancel, a failure) still sent its pages so
      // far: the summary counts them, as query did.
      const ChannelStats cut = sender_->stats().Total();
      report_.bytes_sent +=
          (cut.pages - std::min(cut.pages, before.pages)) * kPageSize;
      return r.status();
    }
    const double s = absl::ToDoubleSeconds(r->elapsed);
    const ChannelStats after = sender_->stats().Total();
    report_.rounds.push_back({r->pages, r->bytes,
                              after.payload_bytes + after.header_bytes -
                                  before.payload_bytes - before.header_bytes,
                              s, final});
    report_.bytes_sent += r->bytes;
    link_.AddRound(r->bytes, s);
    return absl::OkStatus();
  }

  absl::Status LiveRoundsUntilTimeout() {
    // A round can outlast the timeout (round 0 of a large region over a
    // slow link): with cancel, it is cancelled where it stands.
    Deadline deadline(config_.convergence.on_timeout == OnTimeout::kCancel
                          ? transfer_start_ + config_.convergence.timeout
                          : absl::InfiniteFuture(),
                      [this] { sender_->Abort(CancelReason()); });
    absl::Status s = LiveRounds();
    if (deadline.Disarm() && !report_.cancelled) {
      report_.cancelled = true;
      report_.converged_by = "timeout";
      s = CancelReason();
    }
    return s;
  }

  // Rounds while the workload runs, until the convergence policy stops
  // them (ramferry/convergence.h), throttling the workload as it says.
  absl::Status LiveRounds() {
    ConvergencePolicy& policy = policy_;
    while (true) {
      RAMFERRY_RETURN_IF_ERROR(SendRound(false));
      const absl::Time collect_start = absl::Now();
      RAMFERRY_ASSIGN_OR_RETURN(uint64_t collected, Collect());
      const absl::Time now = absl::Now();
      // The wire idles while this runs, between one round's confirmation
      // and the next one's first packet.
      const double collect_s = Seconds(now - collect_start);
      report_.collect_s += collect_s;
      const double interval_s = Seconds(now - last_collect_);
      dirty_pages_seen_ += collected;
      dirty_seconds_ += interval_s;
      last_collect_ = now;
      report_.dirty_pages_per_s =
          dirty_seconds_ > 0 ? dirty_pages_seen_ / dirty_seconds_ : 0;
      // The workload as it writes now (auto-converge's throttle shows
      // here), not averaged over the whole run.
      const double dirty_pages_per_s =
          interval_s > 0 ? collected / interval_s : 0;
      estimate_.NoteCollect(collect_s, collected);

      RoundObservation o;
      o.live_rounds = report_.rounds.size();
      o.remaining_bytes = DirtyPages() * kPageSize;
      const std::optional<double> estimate =
          estimate_.Before(DirtyPages(), dirty_pages_per_s);
      if (estimate) o.estimated_downtime = absl::Seconds(*estimate);
      o.dirty_bytes_per_s = dirty_pages_per_s * kPageSize;
      o.link_bytes_per_s = link_.BytesPerSecond();
      o.elapsed = now - transfer_start_;
      if (ConvergenceConfig c; control_.TakeConvergence(&c)) {
        policy.Reconfigure(c);
      }
      ConvergenceDecision d = policy.Next(o);
      if (d.action == ConvergenceAction::kContinue &&
          control_.postcopy_requested()) {
        d.action = ConvergenceAction::kPostcopy;
        d.reason = "command";
      }
      load_.SetThrottle(d.throttle_percent);

      RoundRecord& round = report_.rounds.back();
      round.remaining_bytes = o.remaining_bytes;
      round.estimated_downtime_s = estimate.value_or(0);
      round.throttle_percent = d.throttle_percent;
      report_.estimated_downtime_s = estimate.value_or(0);
      report_.link_bytes_per_s = o.link_bytes_per_s;
      report_.round_trip_s = link_.RoundTripSeconds();
      report_.throttle_percent = d.throttle_percent;
      report_.stalled = policy.stalled();
      report_.lowest_remaining_bytes = policy.lowest_remaining_bytes();
      live_.dirty_rate_bits.store(LiveState::Bits(report_.dirty_pages_per_s));
      live_.estimate_bits.store(LiveState::Bits(report_.estimated_downtime_s));
      live_.throttle.store(d.throttle_percent);
      PublishRound(round);
      if (d.action == ConvergenceAction::kContinue) continue;
      report_.converged_by = d.reason;
      stopped_with_ = d.action;
      if (d.action == ConvergenceAction::kCancel) return Cancel();
      return absl::OkStatus();
    }
  }

  // What a live round left, for the control clients.
  void PublishRound(const RoundRecord& round) {
    const Json left{
        {"remaining_bytes", round.remaining_bytes},
        {"estimated_downtime_ms", Milliseconds(round.estimated_downtime_s)},
        {"dirty_bytes_per_s", report_.dirty_pages_per_s * kPageSize},
        {"link_bytes_per_s", report_.link_bytes_per_s},
        {"throttle_percent", round.throttle_percent}};
    control_.UpdateProgress(left);
    Json event{{"round", report_.rounds.size() - 1},
               {"pages", round.pages},
               {"bytes", round.bytes},
               {"seconds", round.seconds}};
    event.update(left);
    control_.Publish("round-done", std::move(event));
  }

  // The workload stopped here: the downtime starts.
  void PublishPaused() {
    control_.SetState(report_.switchover == "postcopy"
                          ? MigrationState::kPostcopy
                          : MigrationState::kStopAndCopy);
    control_.Publish("paused",
                     Json{{"pause_ms", Milliseconds(report_.pause_s)}});
  }

  // The destination can take over from here: a complete copy (stop and
  // copy), or its faults armed (post-copy).
  void PublishSwitchover() {
    control_.UpdateProgress(
        {{"downtime_ms", Milliseconds(report_.downtime_s)}});
    control_.Publish("switchover",
                     Json{{"mode", report_.switchover},
                          {"downtime_ms", Milliseconds(report_.downtime_s)}});
  }

  // --on-timeout=cancel: the destination is told why and discards what
  // it holds; the workload never stopped here.
  absl::Status Cancel() {
    absl::Status why = CancelReason();
    report_.cancelled = true;
    report_.converged_by = "timeout";
    sender_->Abort(why);
    return why;
  }

  absl::Status CancelReason() const {
    return absl::CancelledError(absl::StrFormat(
        "migration cancelled: --timeout=%s passed before pre-copy "
        "converged (last estimated downtime %.0f ms, limit %.0f ms); the "
        "source keeps running and the destination discards what it "
        "received",
        absl::FormatDuration(config_.convergence.timeout),
        LiveState::Value(live_.estimate_bits) * 1e3,
        absl::ToDoubleMilliseconds(config_.convergence.downtime_limit)));
  }

  // Stop and copy: nothing writes from here, so the last collect is
  // complete and the final round leaves the destination identical.
  //
  // Paused and collected, the downtime so far is known and only the final
  // round is left to predict (SwitchoverEstimate::Paused): where the
  // rounds stopped because the downtime was estimated to fit and it now
  // would not, the switchover is not made. With post-copy allowed it
  // switches to post-copy from here (kPostcopy); else the workload
  // resumes for more live rounds (kResumed), what this pause took now
  // counted in every estimate, at most kMaxResumes times.
  static constexpr int kMaxResumes = 3;
  enum class SwitchoverTry { kDone, kResumed, kPostcopy };
  absl::StatusOr<SwitchoverTry> StopAndCopy() {
    const absl::Time pause = pause_start_ = absl::Now();
    // A failed pause may have half-happened: Run() resumes it.
    paused_ = true;
    RAMFERRY_RETURN_IF_ERROR(load_.Pause());
    report_.pause_s = Seconds(absl::Now() - pause);
    report_.switchover = SwitchoverName(Switchover::kStopAndCopy);
    PublishPaused();
    RAMFERRY_RETURN_IF_ERROR(Collect().status());
    report_.final_collect_s = Seconds(absl::Now() - pause);
    std::optional<double> estimate =
        estimate_.Paused(report_.final_collect_s, DirtyPages());
    const double limit = absl::ToDoubleSeconds(policy_.config().downtime_limit);
    // A large final round is measured before it is decided on: its first
    // pages go as a round of their own, with the workload paused. Should
    // it resume, they are sent and clean (its writes mark them again);
    // memory is not yet frozen, so the probe goes as live rounds do.
    report_.final_probe_pages = 0;
    double probe_s = 0;
    if (const uint64_t probe =
            estimate_.ProbePages(DirtyPages(), estimate, limit);
        probe > 0) {
      report_.final_probe_pages = TakeProbe(probe);
      RAMFERRY_RETURN_IF_ERROR(SendRound(true, probe_ptrs_));
      probe_s = report_.rounds.back().seconds;
      estimate = estimate_.AfterProbe(Seconds(absl::Now() - pause),
                                      report_.final_probe_pages, probe_s,
                                      DirtyPages());
    }
    report_.switchover_estimate_s = estimate.value_or(0);
    if (report_.converged_by == "downtime-limit" && estimate &&
        *estimate > limit) {
      if (config_.postcopy == PostcopyMode::kAuto) {
        report_.converged_by = "downtime-limit, not met once paused";
        return SwitchoverTry::kPostcopy;
      }
      if (report_.switchovers_resumed < kMaxResumes) {
        estimate_.NotePause(report_.pause_s);
        load_.Resume();
        paused_ = false;
        ++report_.switchovers_resumed;
        report_.resumed_stall_s += Seconds(absl::Now() - pause);
        report_.switchover.clear();
        control_.SetState(MigrationState::kActive);
        return SwitchoverTry::kResumed;
      }
    }
    // Memory is frozen from here (unless a writer the pause cannot stop
    // maps it): the final round needs no staging copy.
    if (config_.pause_freezes) sender_->NoteMemoryFrozen();
    absl::Status s = SendRound(true);
    report_.transfer_s = Seconds(absl::Now() - transfer_start_);
    // Switchover: the destination confirmed the final round.
    report_.downtime_s = Seconds(absl::Now() - pause);
    if (!report_.rounds.empty() && report_.rounds.back().final) {
      report_.final_round_s = probe_s + report_.rounds.back().seconds;
    }
    if (!s.ok()) return s;
    PublishSwitchover();
    // The check's hashing starts once the downtime ended, not inside it
    // (its threads' start and their CPU would lengthen the final round).
    if (config_.verify) {
      RAMFERRY_RETURN_IF_ERROR(sender_->StartVerify());
    }
    return SwitchoverTry::kDone;
  }

  // The switch to post-copy: the workload stops here for good, the last
  // collection completes the set of pages the destination lacks (for
  // --postcopy=now: every page, as no round was sent), and once the
  // destination armed its fault handling the workload resumes there. The
  // downtime ends then; the pages it lacks fault in or are pushed while it
  // runs.
  absl::Status Postcopy() {
    report_.switchover = SwitchoverName(Switchover::kPostcopy);
    live_.postcopy.store(true);
    // From a stop-and-copy given up while paused (StopAndCopy): the
    // downtime began at that pause.
    const bool paused_already = paused_;
    if (!paused_already) pause_start_ = absl::Now();
    const absl::Time pause = pause_start_;
    paused_ = true;
    if (paused_already) {
      // "paused" went out with the stop-and-copy's pause: only the state
      // changes.
      control_.SetState(MigrationState::kPostcopy);
    } else {
      RAMFERRY_RETURN_IF_ERROR(load_.Pause());
      report_.pause_s = Seconds(absl::Now() - pause);
      PublishPaused();
    }
    absl::Status s = Collect().status();
    report_.final_collect_s = Seconds(absl::Now() - pause);
    report_.postcopy_missing_pages = DirtyPages();
    // A client's cancel that came first wins; after this, none does.
    if (s.ok()) s = control_.Commit();
    if (s.ok()) {
      // From here this side's memory is the only copy of the missing
      // pages: the workload must never resume here.
      switched_ = true;
      const absl::Time switch_start = absl::Now();
      s = sender_->StartPostcopy(dirty_ptrs_);
      report_.switch_s = Seconds(absl::Now() - switch_start);
    }
    report_.downtime_s = Seconds(absl::Now() - pause);
    if (!s.ok()) return s;
    PublishSwitchover();
    control_.Publish("postcopy-armed",
                     Json{{"missing_pages", report_.postcopy_missing_pages}});
    // Memory is frozen for good: the check's hashing may start beside the
    // pages still to push, on idle CPU only.
    if (config_.verify) {
      RAMFERRY_RETURN_IF_ERROR(sender_->StartVerify());
    }
    const absl::Time complete_start = absl::Now();
    s = sender_->CompletePostcopy();
    if (!s.ok() && config_.resume_timeout > absl::ZeroDuration()) {
      s = ResumeUntilComplete(std::move(s));
    }
    report_.postcopy_s = Seconds(absl::Now() - complete_start);
    report_.transfer_s = Seconds(absl::Now() - transfer_start_);
    return s;
  }

  // Post-copy was cut after the switch (a link down, a stalled peer): this
  // side's memory is still whole and the destination, told to wait
  // (postcopy_resume_timeout), keeps its workload blocked. New sessions
  // pick it up where it stands until one completes or the time is out.
  absl::Status ResumeUntilComplete(absl::Status cut) {
    report_.postcopy_cut_error = cut.ToString();
    const absl::Time give_up = absl::Now() + config_.resume_timeout;
    absl::Status last = std::move(cut);
    while (absl::Now() < give_up) {
      absl::StatusOr<std::unique_ptr<Sender>> resumed =
          Sender::ResumePostcopy(config_.session, regions_, *sender_);
      if (!resumed.ok()) {
        last = resumed.status();
        // The link may still be down: try again shortly.
        absl::SleepFor(std::min(absl::Seconds(1), give_up - absl::Now()));
        continue;
      }
      ++report_.postcopy_resumes;
      // The cut Sender stays alive until the run ends: the progress
      // thread may still be reading it.
      cut_senders_.push_back(std::move(sender_));
      sender_ = std::move(*resumed);
      live_.sender.store(sender_.get());
      control_.SetSession(SenderHooks(sender_.get()));
      if (config_.verify) {
        RAMFERRY_RETURN_IF_ERROR(sender_->StartVerify());
      }
      last = sender_->CompletePostcopy();
      if (last.ok()) return last;
      report_.postcopy_cut_error = last.ToString();
    }
    return absl::Status(
        last.code(),
        absl::StrFormat("post-copy was cut and not resumed within "
                        "--postcopy-resume-timeout=%s: %s",
                        absl::FormatDuration(config_.resume_timeout),
                        last.message()));
  }

  // The destination answers from the digests it took as pages landed, so
  // it need not wait for this; the source stays paused until the check is
  // done (it may have to resume).
  absl::Status VerifyWhilePaused() {
    if (!switched_) control_.SetState(MigrationState::kVerifying);
    const absl::Time verify_start = absl::Now();
    absl::StatusOr<VerifyReport> v = sender_->Verify();
    report_.verify_s = Seconds(absl::Now() - verify_start);
    if (!v.ok()) return v.status();
    report_.pages_verified = v->pages_checked;
    report_.pages_mismatched = v->pages_mismatched;
    report_.verified = v->ok() && v->pages_checked == region_pages_;
    if (report_.verified) return absl::OkStatus();
    absl::Status bad = absl::DataLossError(absl::StrFormat(
        "verification failed: %d of %d pages differ (first: page %d)",
        v->pages_mismatched, v->pages_checked,
        v->first_mismatches.empty() ? 0 : v->first_mismatches[0].second));
    sender_->Abort(bad);
    return bad;
  }

  absl::Status Finish() {
    // FINISH is the commit point: a client's cancel that came first
    // wins, and none after it does.
    if (absl::Status c = control_.Commit(); !c.ok()) {
      sender_->Abort(c);
      return c;
    }
    absl::Status done = sender_->Finish();
    if (done.ok()) load_.Stop();  // the destination owns the memory now
    return done;
  }

  const PrecopyConfig& config_;
  const absl::Span<const Region> regions_;
  uint64_t region_bytes_ = 0;
  uint64_t region_pages_ = 0;
  DirtyTracker& tracker_;
  Workload& load_;
  LiveControl own_control_;  // when the run has no --control
  LiveControl& control_;
  const absl::Time start_ = absl::Now();
  const double cpu_start_ = cli::ProcessCpuSeconds();
  PrecopyReport report_;
  std::unique_ptr<Sender> sender_;
  std::vector<std::unique_ptr<Sender>> cut_senders_;  // resumed post-copy
  std::vector<DirtyBitmap> dirty_;                    // one per region
  std::vector<DirtyBitmap*> dirty_ptrs_;
  // The final round's first pages, sent first to measure it (StopAndCopy).
  std::vector<DirtyBitmap> probe_;
  std::vector<DirtyBitmap*> probe_ptrs_;
  LiveState live_;
  LinkRate link_;
  SwitchoverEstimate estimate_{link_, region_pages_, kPageSize};
  ConvergencePolicy policy_{config_.convergence};
  // The workload's rate over the live rounds: pages collected, seconds.
  uint64_t dirty_pages_seen_ = 0;
  double dirty_seconds_ = 0;
  absl::Time pause_start_;  // the last pause asked for
  absl::Time transfer_start_;
  absl::Time last_collect_;
  bool paused_ = false;
  // How the convergence policy ended the live rounds.
  ConvergenceAction stopped_with_ = ConvergenceAction::kContinue;
  bool switched_ = false;  // StartPostcopy was called
};

}  // namespace

PrecopyReport RunPrecopy(const PrecopyConfig& config,
                         absl::Span<const Region> regions,
                         DirtyTracker& tracker, Workload& load) {
  return PrecopyRun(config, regions, tracker, load).Run();
}

}  // namespace ramferry::migrate
