// The destination side: pre-fault the region, listen, apply rounds until
// the source finishes, and say whether every page was verified.
#ifndef RAMFERRY_TOOLS_MIGRATE_DESTINATION_H_
#define RAMFERRY_TOOLS_MIGRATE_DESTINATION_H_

#include <cstdint>
#include <functional>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ramferry/options.h"
#include "ramferry/region.h"
#include "ramferry/stats.h"
#include "tools/migrate/live_control.h"
#include "tools/migrate/memload.h"

namespace ramferry::migrate {

// When the destination faults its memory in ahead of the data.
enum class Prefault {
  kOff,     // the receive threads take each first-touch fault themselves
  kBefore,  // all of it, on every core, before listening
  kDuring,  // one background thread from the start of the region once
            // the first page arrives (not while the session is set up: it
            // would hold up the setup's own mappings); it stops when the
            // session ends
  kIdle,    // the same, but only until the first page arrives: it uses the
            // wait for the source and never competes with the receivers
};
absl::StatusOr<Prefault> ParsePrefault(absl::string_view text);
const char* PrefaultName(Prefault p);

struct DestinationReport {
  absl::Status status;
  Prefault prefault = Prefault::kOff;
  double prefault_s = 0;        // time the pre-fault ran (overlapped: kDuring)
  uint64_t prefault_bytes = 0;  // how much it faulted in before it stopped
  uint64_t page_faults = 0;     // minor faults while serving, pre-fault's too
  double serve_s = 0;           // listening until the source finished
  double cpu_s = 0;             // process CPU while serving
  uint64_t rounds_applied = 0;
  uint64_t pages_verified = 0;
  bool verified = false;  // served OK and the source checked every page
  // Post-copy: whether this end allowed it (SessionOptions::postcopy),
  // whether the source switched (the destination armed), and the
  // workload that ran here from then until the session ended.
  bool postcopy_allowed = false;
  bool postcopy_armed = false;
  bool workload = false;  // a workload was to run once armed
  uint64_t workload_pages_written = 0;
  double workload_s = 0;
  // Serve() failed after the switch: the pages still awaited were filled
  // with zeros to let the workload's blocked writers run on and stop
  // (ReleasePostcopy); this memory is no longer the source's.
  uint64_t released_pages = 0;
  // --export: the socket the received memory went to, whether the
  // adopting process took it, and how long that took.
  std::string exported_to;
  bool handed_over = false;
  double handover_s = 0;
  SessionStats stats;
};

// `on_listening(port)` runs once the port is open (before any data). With
// options.postcopy, `workload` (memload's options; none when absent)
// starts writing the region once the destination armed, without dirty
// tracking, as the source's workload would have: its writes to pages not
// yet here fault and wait for them. It stops when the session ends.
// `control` (--control, or a stop signal's cancel) sees the session and
// may cancel it; with `publish_rounds`, the applied rounds are also
// published on it as round-done events (for a --control server's clients).
DestinationReport RunDestination(
    const SessionOptions& options, absl::Span<const Region> regions,
    Prefault prefault, bool progress,
    const std::function<void(uint16_t)>& on_listening,
    std::optional<Memload::Options> workload = std::nullopt,
    LiveControl* control = nullptr, bool publish_rounds = true);

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_DESTINATION_H_
