#include "tools/migrate/postcopy_mode.h"

#include "absl/strings/str_cat.h"
#include "base/named_enum.h"

namespace ramferry::migrate {

namespace {

constexpr base::EnumName<PostcopyMode> kPostcopyModeNames[] = {
    {PostcopyMode::kOn, "on", "after the live rounds"},
    {PostcopyMode::kNow, "now", "before any round"},
    {PostcopyMode::kAuto, "auto", "only when pre-copy does not converge"},
    {PostcopyMode::kOff, "off"},
    {PostcopyMode::kOn, "true", "", /*alias=*/true},
    {PostcopyMode::kOff, "false", "", /*alias=*/true},
};

constexpr base::EnumName<TimeoutAction> kTimeoutActionNames[] = {
    {TimeoutAction::kCancel, "cancel",
     "the source keeps running, the destination is discarded"},
    {TimeoutAction::kForce, "force",
     "stop and copy now, whatever the downtime"},
    {TimeoutAction::kPostcopy, "postcopy",
     "switch to post-copy now; needs --postcopy"},
};

}  // namespace

absl::StatusOr<PostcopyMode> ParsePostcopyMode(absl::string_view text) {
  return base::ParseName(kPostcopyModeNames, "--postcopy", text);
}

const char* PostcopyModeName(PostcopyMode m) {
  return base::NameOf(kPostcopyModeNames, m);
}

absl::StatusOr<TimeoutAction> ParseTimeoutAction(absl::string_view text,
                                                 PostcopyMode mode) {
  if (text.empty()) {
    // A timeout means the live rounds are not converging: with post-copy
    // allowed, that is when it should switch rather than give up.
    return mode == PostcopyMode::kOn || mode == PostcopyMode::kAuto
               ? TimeoutAction::kPostcopy
               : TimeoutAction::kCancel;
  }
  return base::ParseName(kTimeoutActionNames, "--on-timeout", text);
}

const char* TimeoutActionName(TimeoutAction a) {
  return base::NameOf(kTimeoutActionNames, a);
}

const char* SwitchoverName(Switchover s) {
  return s == Switchover::kPostcopy ? "postcopy" : "stop-and-copy";
}

Switchover ChooseSwitchover(PostcopyMode mode, ConvergenceAction action,
                            absl::string_view reason) {
  if (action == ConvergenceAction::kPostcopy) return Switchover::kPostcopy;
  const bool on = mode == PostcopyMode::kOn || mode == PostcopyMode::kNow;
  return on && reason != "timeout" ? Switchover::kPostcopy
                                   : Switchover::kStopAndCopy;
}

absl::StatusOr<bool> ParseOnOff(absl::string_view flag,
                                absl::string_view text) {
  if (text == "on" || text == "true") return true;
  if (text == "off" || text == "false") return false;
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be on or off, not '", text, "'"));
}

absl::Status CheckPostcopyFlags(const PostcopyFlagCheck& c) {
  if (c.mode == PostcopyMode::kOff) {
    if (c.on_timeout == TimeoutAction::kPostcopy) {
      return absl::InvalidArgumentError(
          "--on-timeout=postcopy needs --postcopy (on or auto) on both ends");
    }
    return absl::OkStatus();
  }
  if (absl::StatusOr<bool> u = ParseOnOff("postcopy-urgent", c.urgent);
      !u.ok()) {
    return u.status();
  }
  // The destination places the pages it lacks through userfaultfd, which
  // an RDMA WRITE landing straight in its memory would bypass.
  if (c.transport == "rdma") {
    return absl::InvalidArgumentError(
        "--postcopy is not available with --transport=rdma (its pages land "
        "by RDMA WRITE, past the destination's userfaultfd); use tcp, "
        "tcp-zerocopy or uring-zc");
  }
  if (c.survive_channel_loss) {
    return absl::InvalidArgumentError(
        "--postcopy does not go with --survive-channel-loss (after the "
        "switch a page exists only on the source until it lands; the "
        "re-sending after a lost channel is pre-copy's); drop one of them");
  }
  if (c.destination && !c.region_file.empty()) {
    return absl::InvalidArgumentError(
        "--postcopy needs the destination's memory private anonymous (a "
        "dropped page of a shared file keeps its bytes in the file and "
        "never faults); drop --region-file");
  }
  if (c.destination && !c.export_to.empty()) {
    return absl::InvalidArgumentError(
        "--postcopy with --export: the destination would receive into "
        "private memory that no other process can adopt; migrate with "
        "pre-copy, or drop --export and let the destination's own "
        "workload run on");
  }
  if (c.destination && (c.prefault == "during" || c.prefault == "idle")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prefault=", c.prefault,
        " does not go with --postcopy: a background pre-fault still running "
        "at the switch would refill pages the switch drops with zeros, "
        "which the source's bytes can then no longer replace; use before, "
        "off or auto"));
  }
  return absl::OkStatus();
}

}  // namespace ramferry::migrate
