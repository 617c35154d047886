// ramferry-migrate --attach=SOCKET --hand-over=SOCKET: a local migration
// that copies nothing (HandOverAttached, ramferry/memory_handoff.h), and
// its report.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "ramferry/memory_handoff.h"
#include "tools/migrate/flags.h"
#include "tools/migrate/hand_over_report.h"
#include "tools/migrate/roles.h"

namespace ramferry::migrate {

int RunHandOver() {
  HandOverRun run;
  run.attach = absl::GetFlag(FLAGS_attach);
  run.hand_over = absl::GetFlag(FLAGS_hand_over);
  run.verify = absl::GetFlag(FLAGS_verify) == VerifyFlag::kFull;
  HandOverOptions o;
  o.attach_timeout = absl::GetFlag(FLAGS_connect_timeout);
  o.adopt_timeout = absl::GetFlag(FLAGS_hand_over_timeout);
  o.pause_timeout = absl::GetFlag(FLAGS_attach_pause_timeout);
  o.verify = run.verify;
  const HandOverReport r = HandOverAttached(run.attach, run.hand_over, o);
  const bool migrated = r.outcome == HandOverReport::Outcome::kMigrated;
  if (!migrated) {
    // The cause on stderr as well, where a person looks first.
    std::fprintf(stderr, "ramferry-migrate: hand-over failed: %s\n",
                 std::string(r.status.message()).c_str());
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", HandOverJson(run, r).c_str());
  } else {
    std::printf("%s", HandOverTable(run, r).c_str());
  }
  return migrated ? 0 : 1;
}

}  // namespace ramferry::migrate
