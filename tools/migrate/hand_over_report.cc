#include "tools/migrate/hand_over_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/common/cli.h"
#include "tools/common/json.h"

namespace ramferry::migrate {
namespace {

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

// What became of the workload, in words a caller can act on.
const char* WorkloadAfter(HandOverReport::Outcome o) {
  switch (o) {
    case HandOverReport::Outcome::kMigrated:
      return "migrated (told MIGRATED; the adopter runs the memory)";
    case HandOverReport::Outcome::kResumed:
      return "resumed (the failure came before the adopter's "
             "acknowledgement, the commit point)";
    case HandOverReport::Outcome::kNotPaused:
      return "never paused; runs on";
    case HandOverReport::Outcome::kResumeFailed:
      return "paused, and resuming it failed: it may have gone";
  }
  return "unknown";
}

}  // namespace

std::string HandOverJson(const HandOverRun& run, const HandOverReport& r) {
  const bool migrated = r.outcome == HandOverReport::Outcome::kMigrated;
  cli::Json j = {{"role", "hand-over"}};
  j["ok"] = migrated;
  // Past the commit point a failure to tell the workload is a warning.
  j["error"] =
      r.status.ok() || migrated
          ? cli::Json(nullptr)
          : cli::Json(absl::StrCat(absl::StatusCodeToString(r.status.code()),
                                   ": ", r.status.message()));
  j["warning"] = migrated && !r.status.ok()
                     ? cli::Json(std::string(r.status.message()))
                     : cli::Json(nullptr);
  j["outcome"] = migrated ? "migrated" : "failed";
  j["workload"] = std::string(HandOverOutcomeName(r.outcome));
  j["attach"] = run.attach;
  j["hand_over"] = run.hand_over;
  j["verify"] = run.verify;
  j["workload_pid"] = r.workload_pid;
  j["regions"] = r.regions;
  j["bytes"] = r.bytes;
  j["pause_method"] = r.pause_method;
  j["pause_s"] = r.pause_ns / 1e9;
  j["grant_s"] = r.grant_ns / 1e9;
  j["verify_s"] = r.verify_ns / 1e9;
  j["hand_over_s"] = r.hand_over_ns / 1e9;
  j["downtime_s"] = r.downtime_ns / 1e9;
  j["paused_at_ns"] = r.paused_at_ns;
  return j.dump();
}

std::string HandOverTable(const HandOverRun& run, const HandOverReport& r) {
  const bool migrated = r.outcome == HandOverReport::Outcome::kMigrated;
  std::string t = "ramferry-migrate hand-over\n";
  absl::StrAppendFormat(&t,
                        "  workload         pid %d at %s, %d region%s, %s\n",
                        r.workload_pid, run.attach, r.regions,
                        r.regions == 1 ? "" : "s", cli::FormatBytes(r.bytes));
  absl::StrAppendFormat(&t, "  adopter          %s\n", run.hand_over);
  absl::StrAppendFormat(&t, "  outcome          %s\n",
                        migrated ? "migrated" : "FAILED");
  if (!r.status.ok()) {
    absl::StrAppendFormat(&t, "  %s %s\n",
                          migrated ? "warning         " : "error           ",
                          r.status.ToString());
  }
  absl::StrAppendFormat(&t, "  workload after   %s\n",
                        WorkloadAfter(r.outcome));
  if (r.paused_at_ns == 0) return t;
  absl::StrAppendFormat(&t, "  pause            %.3f ms (by %s)\n",
                        Ms(r.pause_ns), r.pause_method);
  absl::StrAppendFormat(&t, "  grant            %.3f ms (writable files)\n",
                        Ms(r.grant_ns));
  if (run.verify) {
    absl::StrAppendFormat(&t, "  verify           %.3f ms (XXH3 of %s here)\n",
                          Ms(r.verify_ns), cli::FormatBytes(r.bytes));
  }
  absl::StrAppendFormat(&t,
                        "  hand-over        %.3f ms (offer to the adopter's "
                        "acknowledgement%s)\n",
                        Ms(r.hand_over_ns),
                        run.verify ? ", its digest check included" : "");
  if (migrated) {
    absl::StrAppendFormat(&t,
                          "  downtime         %.3f ms (pause to "
                          "acknowledgement)\n",
                          Ms(r.downtime_ns));
  }
  return t;
}

}  // namespace ramferry::migrate
