// The source side of a live migration: pre-copy rounds while the workload
// runs, then a stop-and-copy round with the workload paused (or the
// switch to post-copy: the workload stops here for good and resumes on
// the destination, whose missing pages fault), then page-by-page
// verification against the destination.
#ifndef RAMFERRY_TOOLS_MIGRATE_PRECOPY_H_
#define RAMFERRY_TOOLS_MIGRATE_PRECOPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ramferry/convergence.h"
#include "ramferry/options.h"
#include "ramferry/region.h"
#include "ramferry/stats.h"
#include "tools/migrate/dirty_tracker.h"
#include "tools/migrate/live_control.h"
#include "tools/migrate/postcopy_mode.h"
#include "tools/migrate/workload.h"

namespace ramferry::migrate {

struct PrecopyConfig {
  SessionOptions session;
  // When to stop the live rounds: the downtime limit, stall detection,
  // auto-converge (the workload's throttle), the round limit, a timeout.
  ConvergenceConfig convergence;
  // Post-copy (--postcopy): when to switch; session.postcopy must be set
  // for any mode but off. on_timeout: what the timeout does (its cancel
  // and force are convergence.on_timeout's; postcopy stops the live
  // rounds as force does, then switches).
  PostcopyMode postcopy = PostcopyMode::kOff;
  TimeoutAction on_timeout = TimeoutAction::kCancel;
  // Post-copy cut after the switch: how long to keep trying to resume it
  // (Sender::ResumePostcopy; the destination must wait as long:
  // session.postcopy_resume_timeout). Zero: the migration fails at once.
  absl::Duration resume_timeout = absl::ZeroDuration();
  // Check the destination page by page after the final round, as
  // session.verify says (off: trust the transfer; the report says so).
  bool verify = true;
  bool progress = true;
  // Pausing the workload stops every writer of the regions (nobody else
  // maps them): the final round is sent from frozen memory
  // (Sender::NoteMemoryFrozen). And nothing writes them at all (no
  // workload runs): every round is.
  bool pause_freezes = false;
  bool memory_frozen = false;
  // --control: what the clients of the control socket see and change
  // (none: the run is steered by the flags alone).
  LiveControl* control = nullptr;
};

struct RoundRecord {
  uint64_t pages = 0;
  uint64_t bytes = 0;
  // What the round put on the data channels: headers and payloads as
  // they went (zero pages as offsets, deltas and compressed frames).
  uint64_t wire_bytes = 0;
  double seconds = 0;
  bool final = false;  // sent with the workload paused
  // Live rounds: what was dirty once the round was confirmed, the
  // downtime estimated for stopping then (0: the link was unmeasured),
  // and the workload's throttle from then on.
  uint64_t remaining_bytes = 0;
  double estimated_downtime_s = 0;
  int throttle_percent = 0;
};

struct PrecopyReport {
  absl::Status status;     // OK: migrated and verified
  double prepare_s = 0;    // before the session: map the memory, arm tracking
  double setup_s = 0;      // connect, handshake, region agreement
  bool connected = false;  // the session was set up (Sender::Connect)
  double transfer_s = 0;   // first round start to last round confirmed
  // The downtime: workload paused -> the final round confirmed, when the
  // destination holds a complete copy and may resume (post-copy: -> the
  // destination armed, when it resumes with pages still missing). Of it:
  double pause_s = 0;          // the workload's pause taking effect
  double final_collect_s = 0;  // the last dirty collection
  double final_round_s = 0;    // the final round's pages + its round trip
  // Of the final round: the pages sent first as a probe of its rate
  // (SwitchoverEstimate::ProbePages; 0: none), in their own round.
  uint64_t final_probe_pages = 0;
  // Post-copy: StartPostcopy, the missing set sent as ranges until the
  // destination armed (the rest of the downtime), and CompletePostcopy,
  // every missing page requested or pushed until the destination held it.
  double switch_s = 0;
  double postcopy_s = 0;
  // After the switchover, with the source still paused: the page-by-page
  // check. A destination that must not run before it is verified waits
  // this much longer (downtime_s + verify_s).
  double verify_s = 0;
  double collect_s = 0;  // dirty collections between live rounds, summed
  double downtime_s = 0;
  double total_s = 0;  // start -> verified destination, FINISH confirmed
  // The process's CPU over total_s (every thread: the channels, the
  // tracking, the workload's writers, the check).
  double cpu_s = 0;
  std::vector<RoundRecord> rounds;
  uint64_t bytes_sent = 0;
  uint64_t bytes_resent = 0;  // beyond one copy of the region
  // Why the live rounds ended: "downtime-limit", "stall", "max-rounds" or
  // "timeout" (ConvergenceDecision::reason); empty if they never ended.
  std::string converged_by;
  // --postcopy, and how the migration switched over: "stop-and-copy" or
  // "postcopy" (empty: it never got that far).
  std::string postcopy_mode = "off";
  std::string switchover;
  // Pages the destination lacked at the switch (the bitmap given to
  // StartPostcopy).
  uint64_t postcopy_missing_pages = 0;
  // Post-copy resumed after a cut (--postcopy-resume-timeout): how many
  // times, and the last cut's error. The stats are the last session's.
  uint64_t postcopy_resumes = 0;
  std::string postcopy_cut_error;
  // The timeout cancelled the migration (--on-timeout=cancel): the source
  // kept running and the destination discarded what it received.
  bool cancelled = false;
  // What the last live round estimated the downtime at, before the
  // pause (SwitchoverEstimate::Before). Compare with downtime_s.
  double estimated_downtime_s = 0;
  // Stop-and-copy, paused and collected (and the final round probed,
  // where it was): the downtime so far and the final round as predicted
  // then, which decided the switchover (0: not reached).
  // SwitchoverEstimate says what each counts.
  double switchover_estimate_s = 0;
  // Stop-and-copy attempts given up once paused, the final round not
  // fitting the limit: the workload resumed for more live rounds, and
  // stalled this long in all.
  int switchovers_resumed = 0;
  double resumed_stall_s = 0;
  double link_bytes_per_s = 0;  // as pre-copy measured it
  double round_trip_s = 0;      // as pre-copy measured it
  int throttle_percent = 0;     // auto-converge's last throttle
  bool stalled = false;         // stall detection fired
  uint64_t lowest_remaining_bytes = 0;
  double dirty_pages_per_s = 0;  // measured while the workload ran
  uint64_t pages_verified = 0;
  uint64_t pages_mismatched = 0;
  bool verified = false;
  uint64_t confirmed_rounds = 0;        // rounds the destination confirmed
  bool workload_running_after = false;  // the workload still writes
  // Post-copy failed after the switch began, or the session after FINISH
  // went out (the commit point, Sender::Finish): the workload stays paused
  // here (the destination may have run on), not resumed as after a
  // pre-copy failure.
  bool workload_kept_paused = false;
  // The session failed after FINISH went out: the destination may hold and
  // run the memory, or may not.
  bool outcome_unknown = false;
  // The destination refused FINISH or the switch to post-copy
  // (Sender::commit_outcome kNotCommitted: its commit hook, a cancel
  // there, pages no tag vouched for): it discards the memory, and the
  // workload resumed here.
  bool destination_refused = false;
  uint64_t workload_pages_written = 0;
  SessionStats stats;
};

// Migrates `regions` (4 KiB pages) while `load` writes to them, with
// `tracker` reporting what it wrote (CollectAll, one bitmap per region).
// Never throws; every failure lands in report.status, with the workload
// left running.
PrecopyReport RunPrecopy(const PrecopyConfig& config,
                         absl::Span<const Region> regions,
                         DirtyTracker& tracker, Workload& load);
inline PrecopyReport RunPrecopy(const PrecopyConfig& config,
                                const Region& region, DirtyTracker& tracker,
                                Workload& load) {
  return RunPrecopy(config, {&region, 1}, tracker, load);
}

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_PRECOPY_H_
