#include "tools/migrate/live_control.h"

#include <algorithm>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/named_enum.h"
#include "base/status_macros.h"
#include "ramferry/region.h"
#include "tools/common/cli.h"
#include "tools/common/stats_json.h"

namespace ramferry::migrate {
namespace {

// How a cancel's error begins, on the end that took it.
constexpr absl::string_view kCancelledBy =
    "migration cancelled by a control client (";

constexpr const char* kSettable[] = {"max-bandwidth", "downtime-limit",
                                     "max-rounds", "auto-converge"};

absl::StatusOr<uint64_t> BandwidthValue(const Json& v) {
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    return v.get<uint64_t>();
  }
  if (v.is_string()) {
    absl::StatusOr<uint64_t> rate = cli::ParseRate(v.get<std::string>());
    if (rate.ok()) return rate;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "max-bandwidth must be bytes per second (a number, 0: no limit) or a "
      "rate such as \"1gbit\" or \"100MB\", not ",
      v.dump()));
}

absl::StatusOr<absl::Duration> DowntimeValue(const Json& v) {
  absl::Duration d = -absl::InfiniteDuration();
  if (v.is_number()) d = absl::Milliseconds(v.get<double>());
  if (v.is_string() && !absl::ParseDuration(v.get<std::string>(), &d)) {
    d = -absl::InfiniteDuration();
  }
  if (d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "downtime-limit must be a positive number of milliseconds or a "
        "duration such as \"300ms\", not ",
        v.dump()));
  }
  return d;
}

absl::StatusOr<uint32_t> RoundsValue(const Json& v) {
  if (v.is_number_integer() && v.get<int64_t>() >= 1 &&
      v.get<int64_t>() <= std::numeric_limits<uint32_t>::max()) {
    return static_cast<uint32_t>(v.get<int64_t>());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "max-rounds must be a whole number of rounds, at least 1, not ",
      v.dump()));
}

constexpr base::EnumName<MigrationState> kStateNames[] = {
    {MigrationState::kSetup, "setup"},
    {MigrationState::kActive, "active"},
    {MigrationState::kStopAndCopy, "stop-and-copy"},
    {MigrationState::kPostcopy, "postcopy-active"},
    {MigrationState::kVerifying, "verifying"},
    {MigrationState::kCompleted, "completed"},
    {MigrationState::kFailed, "failed"},
    {MigrationState::kCancelled, "cancelled"},
};

}  // namespace

const char* MigrationStateName(MigrationState s) {
  return base::NameOf(kStateNames, s);
}

std::vector<std::string> LiveEventNames() {
  return {"round-done",     "paused",           "switchover",
          "postcopy-armed", "completed",        "failed",
          "cancelled",      "settings-changed", "state-changed"};
}

LiveControl::LiveControl(Role role, Settings settings, Abilities abilities)
    : role_(role),
      abilities_(abilities),
      start_max_bandwidth_(settings.max_bandwidth),
      settings_(settings) {}

absl::StatusOr<Json> LiveControl::Handle(absl::string_view cmd,
                                         const Json& request) {
  if (cmd == "query") return Query();
  if (cmd == "set") return Set(request);
  if (cmd == "start-postcopy") return StartPostcopy();
  if (cmd == "cancel") return Cancel(request);
  return absl::InvalidArgumentError(
      absl::StrCat("no command '", cmd,
                   "'; the commands are query, set, start-postcopy, cancel "
                   "and subscribe"));
}

absl::Status LiveControl::Ended() const {
  if (state_ != MigrationState::kCompleted &&
      state_ != MigrationState::kFailed &&
      state_ != MigrationState::kCancelled) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the migration has ended (", MigrationStateName(state_), ")"));
}

Json LiveControl::SettingsJson() const {
  const ConvergenceConfig& c = settings_.convergence;
  return Json{
      {"max-bandwidth", settings_.max_bandwidth},
      {"downtime-limit-ms", absl::ToDoubleMilliseconds(c.downtime_limit)},
      {"max-rounds", c.max_rounds},
      {"auto-converge", c.auto_converge}};
}

double LiveControl::RecentRate(uint64_t bytes_now) {
  const absl::Time now = absl::Now();
  while (samples_.size() > 1 && now - samples_[1].first >= absl::Seconds(1)) {
    samples_.pop_front();
  }
  double rate = 0;
  if (!samples_.empty() && bytes_now >= samples_.front().second &&
      now - samples_.front().first >= absl::Milliseconds(100)) {
    rate = (bytes_now - samples_.front().second) /
           absl::ToDoubleSeconds(now - samples_.front().first);
  }
  samples_.emplace_back(now, bytes_now);
  return rate;
}

absl::StatusOr<Json> LiveControl::Query() {
  std::lock_guard<std::mutex> lock(mu_);
  Json r{{"role", role_ == Role::kSource ? "source" : "destination"},
         {"state", MigrationStateName(state_)}};
  if (role_ == Role::kSource) r["settings"] = SettingsJson();
  Json progress = progress_;
  if (session_.stats) {
    const SessionStats st = session_.stats();
    const ChannelStats total = st.Total();
    r[role_ == Role::kSource ? "bytes_sent" : "bytes_received"] =
        total.payload_bytes;
    r["rate_bytes_per_s"] = RecentRate(total.payload_bytes);
    // The round in flight: what it has yet to send (or receive).
    if (progress.contains("round_pages") &&
        progress.contains("pages_before_round")) {
      const uint64_t round_pages = progress["round_pages"];
      const uint64_t before = progress["pages_before_round"];
      const uint64_t done = total.pages >= before ? total.pages - before : 0;
      progress["pending_bytes"] =
          (round_pages - std::min(round_pages, done)) * kPageSize;
    }
    if (state_ == MigrationState::kPostcopy) {
      const PostcopyStats& p = st.postcopy;
      const uint64_t in =
          std::min(p.missing_pages, p.urgent_pages + p.pushed_pages);
      progress["pending_bytes"] = (p.missing_pages - in) * kPageSize;
    }
    r["total"] = cli::ChannelStatsJson(total);
    r["channels"] = cli::ChannelArrayJson(st);
    r["postcopy"] = cli::PostcopyStatsJson(st.postcopy);
    if (!st.streams.empty()) r["streams"] = cli::StreamArrayJson(st);
  }
  progress.erase("pages_before_round");
  r["progress"] = std::move(progress);
  if (!cancelled_.ok()) r["cancel_reason"] = std::string(cancelled_.message());
  return r;
}

absl::StatusOr<Json> LiveControl::Set(const Json& request) {
  if (role_ != Role::kSource) {
    return absl::FailedPreconditionError(
        "set is the source's: these settings steer what it sends");
  }
  Settings next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    next = settings_;
  }
  bool any = false;
  bool bandwidth = false;
  for (const auto& [key, value] : request.items()) {
    if (key == "cmd" || key == "id") continue;
    any = true;
    if (key == "max-bandwidth") {
      RAMFERRY_ASSIGN_OR_RETURN(uint64_t b, BandwidthValue(value));
      next.max_bandwidth = b;
      bandwidth = true;
    } else if (key == "downtime-limit") {
      RAMFERRY_ASSIGN_OR_RETURN(absl::Duration d, DowntimeValue(value));
      next.convergence.downtime_limit = d;
    } else if (key == "max-rounds") {
      RAMFERRY_ASSIGN_OR_RETURN(uint32_t n, RoundsValue(value));
      next.convergence.max_rounds = n;
    } else if (key == "auto-converge") {
      if (!value.is_boolean()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "auto-converge must be true or false, not ", value.dump()));
      }
      if (value.get<bool>() && !abilities_.throttle) {
        return absl::FailedPreconditionError(
            "auto-converge throttles memload's writers; this workload's "
            "writers are its own (--attach) and cannot be throttled");
      }
      next.convergence.auto_converge = value.get<bool>();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("no setting '", key,
                       "'; set takes max-bandwidth, "
                       "downtime-limit, max-rounds and auto-converge"));
    }
  }
  if (!any) {
    return absl::InvalidArgumentError(
        "set needs at least one of max-bandwidth, downtime-limit, "
        "max-rounds and auto-converge");
  }
  Json settings;
  {
    std::lock_guard<std::mutex> lock(mu_);
    RAMFERRY_RETURN_IF_ERROR(Ended());
    // Applied whenever named: a client that re-sends a cap means it.
    if (bandwidth && session_.set_max_bandwidth) {
      session_.set_max_bandwidth(next.max_bandwidth);
    }
    settings_ = next;
    convergence_changed_ = true;
    settings = SettingsJson();
  }
  Publish("settings-changed", settings);
  return settings;
}

absl::StatusOr<Json> LiveControl::StartPostcopy() {
  if (role_ != Role::kSource) {
    return absl::FailedPreconditionError(
        "start-postcopy is the source's: send it there");
  }
  if (!abilities_.postcopy) {
    return absl::FailedPreconditionError(
        "post-copy is off: start both ends with --postcopy=on or "
        "--postcopy=auto to switch by command");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != MigrationState::kSetup && state_ != MigrationState::kActive) {
    return absl::FailedPreconditionError(
        absl::StrCat("too late to start post-copy: the migration is ",
                     MigrationStateName(state_)));
  }
  postcopy_requested_ = true;
  return Json{{"switch", "when the round in flight is confirmed"}};
}

absl::StatusOr<Json> LiveControl::Cancel(const Json& request) {
  std::string reason = "no reason given";
  if (const auto r = request.find("reason"); r != request.end()) {
    if (!r->is_string()) {
      return absl::InvalidArgumentError("\"reason\" must be a string");
    }
    reason = r->get<std::string>();
  }
  std::lock_guard<std::mutex> lock(mu_);
  RAMFERRY_RETURN_IF_ERROR(Ended());
  if (committed_) {
    return absl::FailedPreconditionError(
        "too late to cancel: the switchover has begun, and the destination "
        "may already run the workload");
  }
  if (cancelled_.ok()) {
    cancelled_ = absl::CancelledError(absl::StrCat(
        kCancelledBy, reason,
        "): the source keeps running and the destination discards what it "
        "received"));
    if (session_.abort) session_.abort(cancelled_);
  }
  return Json{{"cancelled", std::string(cancelled_.message())}};
}

void LiveControl::SetSession(SessionHooks hooks) {
  std::lock_guard<std::mutex> lock(mu_);
  session_ = std::move(hooks);
  samples_.clear();
  // A set that came before the session: it started with the flag's cap.
  if (session_.set_max_bandwidth &&
      settings_.max_bandwidth != start_max_bandwidth_) {
    session_.set_max_bandwidth(settings_.max_bandwidth);
  }
  if (!cancelled_.ok() && session_.abort) session_.abort(cancelled_);
}

void LiveControl::SetState(MigrationState s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == s) return;
    state_ = s;
  }
  Publish("state-changed", Json{{"state", MigrationStateName(s)}});
}

MigrationState LiveControl::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

void LiveControl::UpdateProgress(const Json& fields) {
  std::lock_guard<std::mutex> lock(mu_);
  progress_.update(fields);
}

void LiveControl::OnEvent(EventSink sink) {
  std::lock_guard<std::mutex> lock(mu_);
  sink_ = std::move(sink);
}

void LiveControl::Publish(absl::string_view event, Json data) {
  EventSink sink;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sink = sink_;
  }
  if (sink) sink(event, std::move(data));
}

bool LiveControl::TakeConvergence(ConvergenceConfig* c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!convergence_changed_) return false;
  convergence_changed_ = false;
  *c = settings_.convergence;
  return true;
}

bool LiveControl::postcopy_requested() const {
  std::lock_guard<std::mutex> lock(mu_);
  return postcopy_requested_;
}

LiveControl::Settings LiveControl::settings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return settings_;
}

absl::Status LiveControl::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

absl::Status LiveControl::Commit() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!cancelled_.ok()) return cancelled_;
  committed_ = true;
  return absl::OkStatus();
}

absl::Status LiveControl::CancelWith(absl::Status why) {
  std::lock_guard<std::mutex> lock(mu_);
  RAMFERRY_RETURN_IF_ERROR(Ended());
  if (committed_) {
    return absl::FailedPreconditionError("the commit point has passed");
  }
  if (cancelled_.ok()) {
    cancelled_ = std::move(why);
    if (session_.abort) session_.abort(cancelled_);
  }
  return absl::OkStatus();
}

void LiveControl::Finished(const absl::Status& status, bool cancelled,
                           Json summary) {
  const MigrationState end = cancelled     ? MigrationState::kCancelled
                             : status.ok() ? MigrationState::kCompleted
                                           : MigrationState::kFailed;
  SetState(end);
  if (!status.ok()) summary["error"] = std::string(status.message());
  Publish(MigrationStateName(end), std::move(summary));
}

bool IsPeerCancel(const absl::Status& s) {
  return absl::IsCancelled(s) &&
         absl::StartsWith(s.message(), "destination reported") &&
         absl::StrContains(s.message(), kCancelledBy);
}

absl::StatusOr<std::unique_ptr<cli::ControlServer>> ServeControl(
    const std::string& path, LiveControl& control) {
  absl::StatusOr<std::unique_ptr<cli::ControlServer>> server =
      cli::ControlServer::Start(
          path, LiveEventNames(),
          [&control](absl::string_view cmd, const Json& request) {
            return control.Handle(cmd, request);
          });
  if (!server.ok()) return server.status();
  control.OnEvent([s = server->get()](absl::string_view event, Json data) {
    s->Publish(event, std::move(data));
  });
  return server;
}

}  // namespace ramferry::migrate
