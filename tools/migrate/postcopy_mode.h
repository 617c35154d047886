// ramferry-migrate's post-copy choices: when the source switches to
// post-copy (--postcopy), what a timeout does (--on-timeout), and which
// way the live rounds end once the convergence policy stopped them. Pure
// logic, so the choice is tested apart from a migration.
#ifndef RAMFERRY_TOOLS_MIGRATE_POSTCOPY_MODE_H_
#define RAMFERRY_TOOLS_MIGRATE_POSTCOPY_MODE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ramferry/convergence.h"

namespace ramferry::migrate {

enum class PostcopyMode {
  kOff,   // pre-copy only: the live rounds end in stop-and-copy
  kOn,    // the live rounds end in post-copy instead of stop-and-copy
  kNow,   // post-copy at once, before any round: every page faults or is
          // pushed
  kAuto,  // stop-and-copy when the final round is estimated to fit the
          // downtime limit, post-copy when pre-copy did not converge
};
// "off", "on", "now", "auto"; also "true"/"false" as on/off.
absl::StatusOr<PostcopyMode> ParsePostcopyMode(absl::string_view text);
const char* PostcopyModeName(PostcopyMode m);

// What --timeout does when it expires during the live rounds.
enum class TimeoutAction {
  kCancel,    // stop at once; the source keeps running
  kForce,     // stop and copy after the round in flight
  kPostcopy,  // switch to post-copy after the round in flight
};
// "cancel", "force", "postcopy"; "" is the default: postcopy when post-copy
// is on or auto, cancel otherwise.
absl::StatusOr<TimeoutAction> ParseTimeoutAction(absl::string_view text,
                                                 PostcopyMode mode);
const char* TimeoutActionName(TimeoutAction a);

// How the migration switches over to the destination.
enum class Switchover {
  kStopAndCopy,  // a final round with the workload paused
  kPostcopy,     // the workload resumes on the destination at once
};
const char* SwitchoverName(Switchover s);

// The switchover once the live rounds stopped with `action` (the
// convergence policy's, which already switches where post-copy is allowed
// and no final round fits: ConvergenceConfig::postcopy for auto, and
// OnTimeout::kPostcopy) for `reason`. On top of the policy: `on` switches
// wherever the rounds end, unless a timeout says force.
Switchover ChooseSwitchover(PostcopyMode mode, ConvergenceAction action,
                            absl::string_view reason);

// What the tool can check of a post-copy run before it starts, on either
// end: the limits of SessionOptions::postcopy that flags decide.
struct PostcopyFlagCheck {
  PostcopyMode mode = PostcopyMode::kOff;
  TimeoutAction on_timeout = TimeoutAction::kCancel;
  std::string transport;  // --transport as given
  bool survive_channel_loss = false;
  std::string region_file;   // --region-file
  std::string export_to;     // --export
  bool destination = false;  // checking for an end that receives (dest, demo)
  std::string prefault;      // --prefault as given (destination)
  std::string urgent;        // --postcopy-urgent as given
};
// OK, or InvalidArgument naming the flag in the way and what to do.
absl::Status CheckPostcopyFlags(const PostcopyFlagCheck& c);

// --postcopy-urgent: "on" or "off" (SessionOptions::postcopy_urgent_channel).
absl::StatusOr<bool> ParseOnOff(absl::string_view flag, absl::string_view text);

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_POSTCOPY_MODE_H_
