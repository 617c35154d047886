#include "ramferry/convergence.h"

#include <algorithm>

#include "base/named_enum.h"

namespace ramferry {

namespace {

constexpr base::EnumName<OnTimeout> kOnTimeoutNames[] = {
    {OnTimeout::kCancel, "cancel",
     "the source keeps running, the destination is discarded"},
    {OnTimeout::kForce, "force", "stop and copy now, whatever the downtime"},
    {OnTimeout::kPostcopy, "postcopy", "switch to post-copy now"},
};

}  // namespace

const char* OnTimeoutName(OnTimeout o) {
  return base::NameOf(kOnTimeoutNames, o);
}
absl::StatusOr<OnTimeout> ParseOnTimeout(absl::string_view text) {
  return base::ParseName(kOnTimeoutNames, "timeout action", text);
}

ConvergenceDecision ConvergencePolicy::Stop(ConvergenceAction action,
                                            std::string reason) const {
  return {action, std::move(reason), throttle_};
}

void ConvergencePolicy::MaybeThrottle(const RoundObservation& o) {
  if (!config_.auto_converge) return;
  // As QEMU's auto-converge judges it: the workload dirtied more than half
  // of what the link carried, two rounds in a row.
  const bool outrunning =
      o.link_bytes_per_s > 0 && o.dirty_bytes_per_s > 0.5 * o.link_bytes_per_s;
  outrunning_rounds_ = outrunning ? outrunning_rounds_ + 1 : 0;
  if (outrunning_rounds_ < 2 || throttle_ >= config_.throttle_max) return;
  throttle_ = throttle_ == 0 ? config_.throttle_initial
                             : std::min(config_.throttle_max,
                                        throttle_ + config_.throttle_step);
  outrunning_rounds_ = 0;
  // The picture changes with the throttle: judge progress afresh.
  rounds_since_lowest_ = 0;
}

void ConvergencePolicy::Reconfigure(const ConvergenceConfig& config) {
  config_ = config;
  if (!config_.auto_converge) {
    throttle_ = 0;
    outrunning_rounds_ = 0;
  }
  throttle_ = std::min(throttle_, config_.throttle_max);
}

ConvergenceDecision ConvergencePolicy::Next(const RoundObservation& o) {
  if (o.estimated_downtime.has_value() &&
      *o.estimated_downtime <= config_.downtime_limit) {
    return Stop(ConvergenceAction::kStopAndCopy, "downtime-limit");
  }
  if (o.elapsed >= config_.timeout) {
    switch (config_.on_timeout) {
      case OnTimeout::kCancel:
        return Stop(ConvergenceAction::kCancel, "timeout");
      case OnTimeout::kForce:
        return Stop(ConvergenceAction::kStopAndCopy, "timeout");
      case OnTimeout::kPostcopy:
        return Stop(ConvergenceAction::kPostcopy, "timeout");
    }
  }
  // Past this point no final round fits the limit.
  const ConvergenceAction unfit = config_.postcopy
                                      ? ConvergenceAction::kPostcopy
                                      : ConvergenceAction::kStopAndCopy;
  if (o.live_rounds >= config_.max_rounds) return Stop(unfit, "max-rounds");
  const double progress_mark = static_cast<double>(lowest_) * (1.0 - kProgress);
  if (lowest_ == UINT64_MAX ||
      static_cast<double>(o.remaining_bytes) < progress_mark) {
    rounds_since_lowest_ = 0;
  } else {
    ++rounds_since_lowest_;
  }
  lowest_ = std::min(lowest_, o.remaining_bytes);
  MaybeThrottle(o);
  // While auto-converge can still throttle harder, a stall is its job.
  const bool can_throttle =
      config_.auto_converge && throttle_ < config_.throttle_max;
  if (config_.stall_rounds > 0 && !stalled_ && !can_throttle &&
      rounds_since_lowest_ >= config_.stall_rounds) {
    stalled_ = true;
  }
  if (stalled_) {
    // Stop at the lowest point seen, or close to it; it may not come back.
    const bool at_lowest = static_cast<double>(o.remaining_bytes) <=
                           static_cast<double>(lowest_) * (1.0 + kProgress);
    if (at_lowest || ++rounds_stalled_ >= config_.stall_rounds) {
      return Stop(unfit, "stall");
    }
  }
  return Stop(ConvergenceAction::kContinue, "");
}

}  // namespace ramferry
