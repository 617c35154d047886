// What a control client (--control, tools/common/control_socket.h) may
// ask and change of a running migration, and the one place where the
// clients' thread and the migration's meet. Either end has one; the
// source's also takes new settings and the post-copy command.
//
// Commands (the "cmd" of a request):
//   query           the state, the round, bytes sent (received) and
//                   pending, rates, estimated and measured downtime, the
//                   settings, the per-channel counters, post-copy's stats
//   set             source: any of max-bandwidth (bytes/s, or "1gbit",
//                   "100MB"), downtime-limit (ms, or "300ms"), max-rounds,
//                   auto-converge (true/false); all or none are applied
//   start-postcopy  source, started with --postcopy (on or auto): switch
//                   to post-copy when the round in flight is confirmed
//   cancel          {"reason": "..."}: end the migration before the
//                   switchover; the source's workload keeps running and
//                   the destination discards what it received
//
// Invariants:
// - The switchover is the point of no return (the source's FINISH or its
//   switch to post-copy; the destination's post-copy armed): a cancel
//   before it wins (Commit() fails with it), a cancel after it is refused.
// - A new max-bandwidth is applied at once, mid-round (each `set` that
//   names it applies it, the same value too); one set before the session
//   began is applied when it begins (SetSession: a session starts with
//   the flag's cap). The convergence settings apply at the next round's
//   decision (TakeConvergence), the first one too.
// - The session's hooks are called under this object's lock, so the
//   migration clears them (SetSession({})) before its session goes.
#ifndef RAMFERRY_TOOLS_MIGRATE_LIVE_CONTROL_H_
#define RAMFERRY_TOOLS_MIGRATE_LIVE_CONTROL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ramferry/convergence.h"
#include "ramferry/stats.h"
#include "tools/common/control_socket.h"
#include "tools/common/json.h"

namespace ramferry::migrate {

using cli::Json;

enum class MigrationState {
  kSetup,        // memory, connection, handshake
  kActive,       // live rounds (destination: applying them)
  kStopAndCopy,  // source: the workload paused, the final round
  kPostcopy,     // switched: missing pages fault in or are pushed
  kVerifying,    // source: the page-by-page check, workload paused
  kCompleted,
  kFailed,
  kCancelled,
};
const char* MigrationStateName(MigrationState s);

// Every event either end publishes.
std::vector<std::string> LiveEventNames();

class LiveControl {
 public:
  enum class Role { kSource, kDestination };

  // What `set` changes, as the run started with it.
  struct Settings {
    uint64_t max_bandwidth = 0;  // bytes/s; 0: none
    ConvergenceConfig convergence;
  };

  // What the run may do that depends on how it was started.
  struct Abilities {
    bool postcopy = false;  // --postcopy is on or auto (source)
    bool throttle = false;  // the workload can be throttled
  };

  // How a command reaches the session in progress.
  struct SessionHooks {
    std::function<SessionStats()> stats;
    std::function<void(const absl::Status&)> abort;
    std::function<void(uint64_t)> set_max_bandwidth;  // source
  };

  using EventSink = std::function<void(absl::string_view, Json)>;

  LiveControl(Role role, Settings settings, Abilities abilities);

  // Where events go (the server's Publish).
  void OnEvent(EventSink sink);

  // ---- the control clients' side (one thread) ----
  absl::StatusOr<Json> Handle(absl::string_view cmd, const Json& request);

  // ---- the migration's side ----
  // The session now running (or none: {}). A cancel that came first
  // aborts it at once.
  void SetSession(SessionHooks hooks);
  void SetState(MigrationState s);
  MigrationState state() const;
  // What query reports of the run beside the counters (the round, its
  // pages, the estimate...); merged into "progress".
  void UpdateProgress(const Json& fields);
  void Publish(absl::string_view event, Json data);
  // The convergence settings changed since the last call: `*c` gets them.
  bool TakeConvergence(ConvergenceConfig* c);
  bool postcopy_requested() const;
  // The settings in force now (the flags', as `set` changed them).
  Settings settings() const;
  // The cancel a client asked for (OK: none).
  absl::Status cancelled() const;
  // The point of no return: fails with the cancel if one came first;
  // after it, cancel is refused.
  absl::Status Commit();
  // A cancel from this process itself (a stop signal), for `why`, under
  // a client's cancel's rule: before the commit point it ends the session
  // (or the one to come, at once); after it, or once the run ended, it is
  // refused (FailedPrecondition).
  absl::Status CancelWith(absl::Status why);
  // The run's end: its state (completed, failed or cancelled) and event.
  void Finished(const absl::Status& status, bool cancelled, Json summary);

 private:
  absl::StatusOr<Json> Query();
  absl::StatusOr<Json> Set(const Json& request);
  absl::StatusOr<Json> StartPostcopy();
  absl::StatusOr<Json> Cancel(const Json& request);
  // FailedPrecondition once the run has ended; mu_ held.
  absl::Status Ended() const;
  Json SettingsJson() const;              // mu_ held
  double RecentRate(uint64_t bytes_now);  // mu_ held

  const Role role_;
  const Abilities abilities_;
  const uint64_t start_max_bandwidth_;  // what a session starts with

  mutable std::mutex mu_;
  EventSink sink_;
  Settings settings_;
  bool convergence_changed_ = false;
  bool postcopy_requested_ = false;
  absl::Status cancelled_;
  bool committed_ = false;
  MigrationState state_ = MigrationState::kSetup;
  Json progress_ = Json::object();
  SessionHooks session_;
  // (when, bytes moved) at the last queries: the rate over about a second.
  std::deque<std::pair<absl::Time, uint64_t>> samples_;
};

// Whether `s` is the destination's cancel (a control client's there) as
// the source receives it: CANCELLED, "destination reported: " and the
// text Cancel gives it.
bool IsPeerCancel(const absl::Status& s);

// --control=PATH: serves `control` on PATH until the server goes (before
// `control` does).
absl::StatusOr<std::unique_ptr<cli::ControlServer>> ServeControl(
    const std::string& path, LiveControl& control);

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_LIVE_CONTROL_H_
