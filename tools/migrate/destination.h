// The destination side: pre-fault the region, listen, apply rounds until
// the source finishes, and say whether every page was verified.
#ifndef RAMFERRY_TOOLS_MIGRATE_DESTINATION_H_
#define RAMFERRY_TOOLS_MIGRATE_DESTINATION_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "ramferry/options.h"
#include "ramferry/region.h"
#include "ramferry/stats.h"

namespace ramferry::migrate {

struct DestinationReport {
  absl::Status status;
  double prefault_s = 0;
  double serve_s = 0;  // listening until the source finished
  double cpu_s = 0;    // process CPU while serving
  uint64_t rounds_applied = 0;
  uint64_t pages_verified = 0;
  bool verified = false;  // served OK and the source checked every page
  SessionStats stats;
};

// `on_listening(port)` runs once the port is open (before any data).
DestinationReport RunDestination(
    const SessionOptions& options, const Region& region, bool prefault,
    bool progress, const std::function<void(uint16_t)>& on_listening);

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_DESTINATION_H_
