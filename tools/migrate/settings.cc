// What ramferry-migrate's flags say, checked (settings.h).
#include "tools/migrate/settings.h"

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
// WasPresentOnCommandLine: a flag named at its default value is named.
#include "absl/flags/internal/parse.h"
#include "absl/flags/reflection.h"  // GetAllFlags
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "ramferry/region.h"
#include "tools/common/auth_flags.h"
#include "tools/common/channel_flags.h"
#include "tools/migrate/flags.h"
#include "tools/migrate/postcopy_mode.h"
#include "tools/migrate/report.h"
#include "tools/migrate/stop_signals.h"

namespace ramferry::migrate {

// --dirty-rate=auto into anonymous memory.
constexpr double kAutoRatePagesPerS = (256 << 20) / double{kPageSize};

int Usage(const std::string& why) {
  std::fprintf(stderr, "ramferry-migrate: %s (see --help)\n", why.c_str());
  return 2;
}

bool AutoTransport() { return !absl::GetFlag(FLAGS_transport).kind; }

absl::StatusOr<SessionOptions> Session() {
  SessionOptions o;
  // auto: tcp until the source knows where it connects (ChooseFor).
  o.transport =
      absl::GetFlag(FLAGS_transport).kind.value_or(TransportKind::kTcp);
  RAMFERRY_RETURN_IF_ERROR(cli::ApplyChannelFlags(&o));
  o.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  o.stall_timeout = absl::GetFlag(FLAGS_stall_timeout);
  o.survive_channel_loss = absl::GetFlag(FLAGS_survive_channel_loss);
  o.max_bandwidth = absl::GetFlag(FLAGS_max_bandwidth).bytes_per_s;
  o.postcopy = PostcopyFlag() != PostcopyMode::kOff;
  o.postcopy_urgent_channel =
      absl::GetFlag(FLAGS_postcopy_urgent) == OnOff::kOn;
  o.postcopy_resume_timeout = absl::GetFlag(FLAGS_postcopy_resume_timeout);
  if (o.postcopy_resume_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--postcopy-resume-timeout must not be negative");
  }
  switch (absl::GetFlag(FLAGS_verify)) {
    case VerifyFlag::kFull:
      o.verify = VerifyMode::kFull;
      break;
    case VerifyFlag::kSent:
      o.verify = VerifyMode::kSent;
      break;
    case VerifyFlag::kOff:
      // Nothing recorded and Verify not called; post-copy refuses kReread
      // (the destination's workload writes before a Verify could re-read),
      // so it records the destination's digests it will not use.
      o.verify = o.postcopy ? VerifyMode::kFull : VerifyMode::kReread;
      break;
  }
  RAMFERRY_RETURN_IF_ERROR(cli::ApplyAuthFlags(&o));
  // --demo starts both ends: a key only they hold authenticates them,
  // unless asked to run without one.
  if (absl::GetFlag(FLAGS_demo) && o.auth_key.empty() && !o.insecure) {
    if (absl::GetFlag(FLAGS_allow_unauthenticated)) {
      o.insecure = true;
    } else {
      o.auth_key = cli::EphemeralAuthKey();
    }
  }
  RAMFERRY_RETURN_IF_ERROR(ValidateOptions(o));
  return o;
}

PostcopyMode PostcopyFlag() { return absl::GetFlag(FLAGS_postcopy); }

// --on-timeout, whose default (none) follows --postcopy.
TimeoutAction TimeoutActionFlag() {
  if (const std::optional<TimeoutAction> on = absl::GetFlag(FLAGS_on_timeout)) {
    return *on;
  }
  return *ParseTimeoutAction("", PostcopyFlag());
}

// What the flags allow of post-copy, checked before either end starts
// (the engine checks the rest: the destination's memory, the peer's
// consent). `receives`: this process runs a destination (dest, --demo).
absl::Status CheckPostcopy(bool receives) {
  PostcopyFlagCheck c;
  c.mode = PostcopyFlag();
  c.on_timeout = TimeoutActionFlag();
  c.transport = AbslUnparseFlag(absl::GetFlag(FLAGS_transport));
  c.survive_channel_loss = absl::GetFlag(FLAGS_survive_channel_loss);
  c.region_file = absl::GetFlag(FLAGS_region_file);
  c.export_to = absl::GetFlag(FLAGS_export);
  c.destination = receives;
  c.prefault = AbslUnparseFlag(absl::GetFlag(FLAGS_prefault));
  c.urgent = AbslUnparseFlag(absl::GetFlag(FLAGS_postcopy_urgent));
  return CheckPostcopyFlags(c);
}

// --attach and --export: which role takes which, and what they replace.
absl::Status CheckHandoffFlags(std::optional<Role> role) {
  const bool demo = absl::GetFlag(FLAGS_demo);
  if (!absl::GetFlag(FLAGS_attach).empty()) {
    if (!demo && role != Role::kSource) {
      return absl::InvalidArgumentError("--attach is the source's");
    }
    if (!absl::GetFlag(FLAGS_region_file).empty()) {
      return absl::InvalidArgumentError(
          "--attach migrates the exported memory: drop --region-file");
    }
    if (absl::GetFlag(FLAGS_dirty_tracking) != DirtyTracking::kUffd) {
      return absl::InvalidArgumentError(
          "--attach tracks the workload's writes with its userfaultfd "
          "registration: drop --dirty-tracking");
    }
    if (absl::GetFlag(FLAGS_auto_converge)) {
      return absl::InvalidArgumentError(
          "--auto-converge throttles memload's writers; an attached "
          "workload's are its own: drop one of them");
    }
  }
  if (!absl::GetFlag(FLAGS_export).empty() && !demo && role != Role::kDest) {
    return absl::InvalidArgumentError("--export is the destination's");
  }
  return absl::OkStatus();
}

absl::Status CheckHandOverFlags() {
  if (absl::GetFlag(FLAGS_attach).empty()) {
    return absl::InvalidArgumentError(
        "--hand-over passes an attached workload's memory on: give "
        "--attach=SOCKET (the workload's export)");
  }
  const std::optional<Role> role = absl::GetFlag(FLAGS_role);
  if (role.has_value() && *role != Role::kSource) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--hand-over is a local migration from the workload's side: drop "
        "--role=",
        AbslUnparseFlag(*role),
        " (the adopter is the process at --hand-over)"));
  }
  const VerifyFlag verify = absl::GetFlag(FLAGS_verify);
  if (verify != VerifyFlag::kFull && verify != VerifyFlag::kOff) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--hand-over: --verify=", AbslUnparseFlag(verify),
        " makes no sense (nothing is sent): use --verify=full (a digest "
        "per region, checked by the adopter) or --verify=off"));
  }
  // A hand-over has no network, no destination process and no rounds:
  // every flag of the tool but the few it reads would be silently
  // ignored, so each one named on the command line (or not at its
  // default) is refused. The list is what the hand-over takes, not what
  // it does not, so a flag added later is refused until it is honoured.
  static constexpr absl::string_view kHandOverFlags[] = {"attach",
                                                         "hand_over",
                                                         "hand_over_timeout",
                                                         "attach_pause_timeout",
                                                         "role",
                                                         "connect_timeout",
                                                         "verify",
                                                         "json"};
  std::vector<absl::string_view> refused;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!cli::IsBinaryFlag(flag->Filename(), kFlagsFile) ||
        absl::c_linear_search(kHandOverFlags, name)) {
      continue;
    }
    if (absl::flags_internal::WasPresentOnCommandLine(name) ||
        flag->CurrentValue() != flag->DefaultValue()) {
      refused.push_back(name);
    }
  }
  if (!refused.empty()) {
    absl::c_sort(refused);
    const std::string flag = absl::StrReplaceAll(refused[0], {{"_", "-"}});
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag,
        " does not go with --hand-over: a hand-over moves the memory on "
        "this host in one step, with no network, destination process, "
        "rounds, stream protection or post-copy; drop --",
        flag, " (or --hand-over, to migrate over the network)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ConvergenceConfig> Convergence() {
  ConvergenceConfig c;
  c.downtime_limit = absl::GetFlag(FLAGS_downtime_limit);
  c.max_rounds = absl::GetFlag(FLAGS_max_rounds);
  c.stall_rounds = absl::GetFlag(FLAGS_stall_rounds);
  c.auto_converge = absl::GetFlag(FLAGS_auto_converge);
  c.timeout = absl::GetFlag(FLAGS_timeout);
  if (c.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--timeout must be positive (or inf)");
  }
  switch (TimeoutActionFlag()) {
    case TimeoutAction::kCancel:
      c.on_timeout = OnTimeout::kCancel;
      break;
    case TimeoutAction::kForce:
      c.on_timeout = OnTimeout::kForce;
      break;
    case TimeoutAction::kPostcopy:
      c.on_timeout = OnTimeout::kPostcopy;
      break;
  }
  // auto: the policy switches where no final round fits (on switches
  // wherever the rounds end: ChooseSwitchover).
  c.postcopy = PostcopyFlag() == PostcopyMode::kAuto;
  return c;
}

absl::StatusOr<std::unique_ptr<cli::ControlServer>> ControlFromFlag(
    LiveControl& control) {
  const std::string path = absl::GetFlag(FLAGS_control);
  if (path.empty()) return nullptr;
  absl::StatusOr<std::unique_ptr<cli::ControlServer>> server;
  stop_signals::StartControlSocket(path, [&] {
    server = ServeControl(path, control);
    return server.ok();
  });
  return server;
}

double DirtyPagesPerSecond(bool file_backed) {
  const double rate = absl::GetFlag(FLAGS_dirty_rate).pages_per_s;
  if (rate >= 0) return rate;
  return file_backed ? 0 : kAutoRatePagesPerS;
}

RunDescription Describe(const SessionOptions& o, uint64_t bytes,
                        absl::string_view tracking) {
  RunDescription d;
  d.transport = std::string(TransportKindName(o.transport));
  d.completion = std::string(CompletionPolicyName(o.completion));
  d.channels = o.channels;
  d.region_bytes = bytes;
  d.region = absl::GetFlag(FLAGS_region_file).empty()
                 ? "anonymous"
                 : absl::GetFlag(FLAGS_region_file);
  d.dirty_tracking = std::string(tracking);
  d.dirty_set_bytes = absl::GetFlag(FLAGS_dirty_set).bytes;
  d.dirty_rate_bytes_per_s =
      DirtyPagesPerSecond(d.region != "anonymous") * kPageSize;
  d.writers = absl::GetFlag(FLAGS_writers);
  d.downtime_limit_s =
      absl::ToDoubleSeconds(absl::GetFlag(FLAGS_downtime_limit));
  d.max_rounds = absl::GetFlag(FLAGS_max_rounds);
  d.stall_rounds = absl::GetFlag(FLAGS_stall_rounds);
  d.auto_converge = absl::GetFlag(FLAGS_auto_converge);
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  d.timeout_s =
      timeout == absl::InfiniteDuration() ? 0 : absl::ToDoubleSeconds(timeout);
  d.on_timeout = TimeoutActionName(TimeoutActionFlag());
  d.postcopy = PostcopyModeName(PostcopyFlag());
  d.postcopy_urgent = o.postcopy_urgent_channel;
  d.max_bandwidth = o.max_bandwidth;
  d.max_bandwidth_flag = o.max_bandwidth;
  d.authenticated = !o.auth_key.empty();
  d.protect = ProtectionName(ResolvedProtection(o));
  d.verify_mode = AbslUnparseFlag(absl::GetFlag(FLAGS_verify));
  d.image = d.region == "anonymous" ? absl::GetFlag(FLAGS_image) : "the file's";
  return d;
}

}  // namespace ramferry::migrate
