// ramferry-migrate --attach --hand-over: its report, as a table for
// people and JSON for tools (the same fields, as report.h does for a
// migration over the network).
#ifndef RAMFERRY_TOOLS_MIGRATE_HAND_OVER_REPORT_H_
#define RAMFERRY_TOOLS_MIGRATE_HAND_OVER_REPORT_H_

#include <string>

#include "ramferry/memory_handoff.h"

namespace ramferry::migrate {

// What was asked, for the report's header.
struct HandOverRun {
  std::string attach;     // --attach
  std::string hand_over;  // --hand-over
  bool verify = false;
};

std::string HandOverJson(const HandOverRun& run, const HandOverReport& r);
std::string HandOverTable(const HandOverRun& run, const HandOverReport& r);

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_HAND_OVER_REPORT_H_
