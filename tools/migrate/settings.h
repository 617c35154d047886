// What ramferry-migrate's flags say, checked: the session's options, the
// post-copy mode and timeout action, the convergence policy, the dirty
// rate, and the run's description for the report. Every role reads them.
#ifndef RAMFERRY_TOOLS_MIGRATE_SETTINGS_H_
#define RAMFERRY_TOOLS_MIGRATE_SETTINGS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ramferry/convergence.h"
#include "ramferry/options.h"
#include "tools/common/control_socket.h"
#include "tools/migrate/flags.h"
#include "tools/migrate/live_control.h"
#include "tools/migrate/postcopy_mode.h"
#include "tools/migrate/report.h"

namespace ramferry::migrate {

// Says `why` on stderr, with a pointer to --help; returns exit code 2.
int Usage(const std::string& why);

bool AutoTransport();
// The session's options from the flags (the library's checks included).
absl::StatusOr<SessionOptions> Session();
PostcopyMode PostcopyFlag();
// --on-timeout, or what it is without one (ParseTimeoutAction).
TimeoutAction TimeoutActionFlag();
// The post-copy flags, checked for the end that `receives` or sends.
absl::Status CheckPostcopy(bool receives);
// --attach/--export and their companions, checked for `role`.
absl::Status CheckHandoffFlags(std::optional<Role> role);
// --hand-over: a local migration of an --attach'ed workload, without a
// role, a network or a destination; everything of those is refused.
absl::Status CheckHandOverFlags();
absl::StatusOr<ConvergenceConfig> Convergence();
// --control: serves `control` on the flag's path (registered with
// stop_signals, so a stop signal at any point removes it); none without
// the flag.
absl::StatusOr<std::unique_ptr<cli::ControlServer>> ControlFromFlag(
    LiveControl& control);
// --dirty-rate in pages per second; auto by the memory's kind.
double DirtyPagesPerSecond(bool file_backed);
// The run as the report describes it.
RunDescription Describe(const SessionOptions& o, uint64_t bytes,
                        absl::string_view tracking);

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_SETTINGS_H_
