// When to stop pre-copy: the decisions a live migration takes after each
// round, as pure logic a caller feeds with what it measured. The
// migration tool drives it; an embedding caller (a hypervisor with its
// own vCPU throttle) can drive it the same way:
//
//   ramferry::ConvergencePolicy policy(config);
//   while (true) {
//     ... SendRound, collect the dirty pages ...
//     ramferry::ConvergenceDecision d = policy.Next(observation);
//     set_vcpu_throttle(d.throttle_percent);   // the caller's own knob
//     if (d.action != ramferry::ConvergenceAction::kContinue) break;
//   }
//
// Thread-compatible.
#ifndef RAMFERRY_CONVERGENCE_H_
#define RAMFERRY_CONVERGENCE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ramferry {

// What a timeout (ConvergenceConfig::timeout) does.
enum class OnTimeout : uint8_t {
  // Give up: the source keeps running, the destination is discarded.
  kCancel,
  // Stop and copy now, whatever the downtime turns out to be.
  kForce,
  // Switch to post-copy now (Sender::StartPostcopy): the downtime is the
  // switch's, the rest faults in or is pushed.
  kPostcopy,
};
const char* OnTimeoutName(OnTimeout o);
// "cancel", "force" or "postcopy".
absl::StatusOr<OnTimeout> ParseOnTimeout(absl::string_view text);

struct ConvergenceConfig {
  // Stop and copy once the final round is estimated to fit in this.
  absl::Duration downtime_limit = absl::Milliseconds(300);
  // Live rounds (round 0 included) before stopping regardless.
  uint32_t max_rounds = 30;
  // Stall detection: the remaining bytes are stalled once this many
  // rounds in a row brought no new low (by at least kProgress); 0: off.
  // Stalled, pre-copy stops at the next round that comes back to the
  // lowest point seen (or stall_rounds rounds later, whichever is first),
  // so the final round is the smallest pre-copy can make.
  uint32_t stall_rounds = 5;
  // Auto-converge: throttle the workload in steps while it dirties faster
  // than half of what the link carries and the final round does not fit.
  bool auto_converge = false;
  int throttle_initial = 20;  // percent
  int throttle_step = 10;
  int throttle_max = 99;
  // From the first round's start; infinite: none.
  absl::Duration timeout = absl::InfiniteDuration();
  OnTimeout on_timeout = OnTimeout::kCancel;
  // Post-copy is allowed: live rounds that stop without a final round
  // estimated to fit the downtime limit (stalled at their lowest point,
  // out of rounds) switch to post-copy (kPostcopy) instead of stopping and
  // copying, so the downtime is the switch's rather than the final
  // round's. A final round that fits is still sent (kStopAndCopy).
  bool postcopy = false;
};

// What a round measured, after its dirty pages were collected.
struct RoundObservation {
  uint64_t live_rounds = 0;      // rounds sent so far, this one included
  uint64_t remaining_bytes = 0;  // dirty now: the final round's size
  // The final round's downtime if pre-copy stopped now; nullopt while
  // the link is unmeasured (an unknown estimate never counts as fitting).
  std::optional<absl::Duration> estimated_downtime;
  double dirty_bytes_per_s = 0;  // what the workload wrote
  double link_bytes_per_s = 0;   // what the link carried
  absl::Duration elapsed;        // since the first round started
};

enum class ConvergenceAction : uint8_t {
  kContinue,     // send another live round
  kStopAndCopy,  // pause the workload and send the final round
  kPostcopy,     // pause the workload and switch to post-copy
  kCancel,       // abandon the migration (OnTimeout::kCancel)
};

struct ConvergenceDecision {
  ConvergenceAction action = ConvergenceAction::kContinue;
  // Why it stopped: "downtime-limit", "stall", "max-rounds", "timeout".
  std::string reason;
  // The workload throttle to apply from now on (0: none).
  int throttle_percent = 0;
};

class ConvergencePolicy {
 public:
  // A round counts as progress when it cuts the lowest remaining bytes
  // seen by at least this share.
  static constexpr double kProgress = 0.05;

  explicit ConvergencePolicy(const ConvergenceConfig& config)
      : config_(config) {}

  ConvergenceDecision Next(const RoundObservation& o);

  // New limits from the next Next() on, mid-migration (a control client
  // changed them); what was observed so far (the lowest point, the stall)
  // is kept. Turning auto_converge off releases the throttle.
  void Reconfigure(const ConvergenceConfig& config);
  const ConvergenceConfig& config() const { return config_; }

  int throttle_percent() const { return throttle_; }
  bool stalled() const { return stalled_; }
  uint64_t lowest_remaining_bytes() const { return lowest_; }

 private:
  ConvergenceDecision Stop(ConvergenceAction action, std::string reason) const;
  // Auto-converge: one step up, if the workload still outruns the link.
  void MaybeThrottle(const RoundObservation& o);

  ConvergenceConfig config_;
  int throttle_ = 0;
  uint64_t lowest_ = UINT64_MAX;
  uint32_t rounds_since_lowest_ = 0;
  uint32_t outrunning_rounds_ = 0;  // consecutive, for auto-converge
  bool stalled_ = false;
  uint32_t rounds_stalled_ = 0;
};

}  // namespace ramferry

#endif  // RAMFERRY_CONVERGENCE_H_
