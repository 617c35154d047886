// The migration report, as a table for people and JSON for tools.
#ifndef RAMFERRY_TOOLS_MIGRATE_REPORT_H_
#define RAMFERRY_TOOLS_MIGRATE_REPORT_H_

#include <string>
#include <utility>
#include <vector>

#include "tools/migrate/destination.h"
#include "tools/migrate/precopy.h"

namespace ramferry::migrate {

// What the run was, for the report's header.
struct RunDescription {
  std::string transport;
  std::string transport_reason;  // why --transport=auto chose it, else empty
  std::string completion;
  uint32_t channels = 0;
  uint64_t region_bytes = 0;
  std::string region;  // "anonymous" or the file path
  std::string dirty_tracking;
  uint64_t dirty_set_bytes = 0;
  double dirty_rate_bytes_per_s = 0;
  int writers = 0;
  double downtime_limit_s = 0;
  uint32_t max_rounds = 0;
  uint32_t stall_rounds = 0;
  bool auto_converge = false;
  double timeout_s = 0;          // 0: none
  std::string on_timeout;        // cancel, force or postcopy, as it applies
  std::string postcopy = "off";  // --postcopy: off, on, now, auto
  bool postcopy_urgent = true;   // --postcopy-urgent
  // The bandwidth cap in bytes per second (0: none): in force at the end,
  // and as the run started (--max-bandwidth); they differ where a control
  // client set another.
  uint64_t max_bandwidth = 0;
  uint64_t max_bandwidth_flag = 0;
  bool authenticated = false;    // a pre-shared key authenticated every link
  std::string protect = "none";  // what guarded the stream: none, mac, encrypt
  std::string verify_mode;       // --verify: full, sent or off
  std::string image;             // --image of anonymous memory, or the file's
  // --region-file mapped by other processes (--allow-foreign-writers):
  // their writes are invisible to the dirty tracking. Empty: none.
  std::string untracked_writers;
  // --attach: the exporting process ("pid N at SOCKET"), how its final
  // pause was made ("handler" or "SIGSTOP") and why SIGSTOP, if it was.
  std::string attached;
  std::string pause_method;
  std::string pause_note;
  // --demo-link: each link's {destination address, rate}, so the per-link
  // summary can say what each link was limited to.
  std::vector<std::pair<std::string, std::string>> link_rates;
};

std::string SourceJson(const RunDescription& run, const PrecopyReport& r,
                       const std::string& destination_json);
std::string SourceTable(const RunDescription& run, const PrecopyReport& r);

std::string DestinationJson(const DestinationReport& r);
std::string DestinationTable(const DestinationReport& r);

// Post-copy's counters as report lines, as each end has them: whether
// requests had the urgent channel, the pages missing at the switch, the
// switch and the post-copy phase; the source's requested, urgent and
// pushed pages; the destination's requested, urgent and duplicate pages,
// its faults, their latency and the non-empty histogram buckets
// ("[lo,hi) us: n").
std::string PostcopyLines(const PostcopyStats& p, bool destination);

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_REPORT_H_
