// ramferry-migrate's roles: the source, the destination and the demo
// that runs both, each from the flags (flags.h, settings.h).
#ifndef RAMFERRY_TOOLS_MIGRATE_ROLES_H_
#define RAMFERRY_TOOLS_MIGRATE_ROLES_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ramferry/options.h"
#include "ramferry/region.h"
#include "tools/common/link_testbed.h"
#include "tools/migrate/destination.h"
#include "tools/migrate/memload.h"
#include "tools/migrate/region_memory.h"

namespace ramferry::migrate {

// The destination's own report, when it runs as our child (--demo).
struct PeerReport {
  std::string json;
  std::string table;
};
// `connected`: whether the source set a session up; a destination reports
// only once a session of its own ended.
using FetchPeerReport = std::function<PeerReport(bool connected)>;

// The source role, given where to connect (over `links`' links, for
// --demo-link).
int RunSourceRole(SessionOptions opt, const FetchPeerReport& fetch_peer = {},
                  const cli::LinkTestbed* links = nullptr);

// The destination role, listening where `opt` says.
int RunDestRole(SessionOptions opt);

// The destination's pieces, which the demo's destination process runs too.
// Its memory: one per --size; anonymous (huge pages), a file, or for
// --export a memfd another process can adopt.
using DestinationMemories = std::vector<std::unique_ptr<RegionMemory>>;
absl::StatusOr<DestinationMemories> DestinationMemory(const std::string& file);
// --export: a migrated destination hands its memory over.
void HandOver(const DestinationMemories& mems, DestinationReport* r);
std::vector<Region> DestinationRegions(const DestinationMemories& mems);
absl::StatusOr<Prefault> DestinationPrefault(const RegionMemory& mem);
std::optional<Memload::Options> DestinationWorkload();
// A stop signal (stop_signals.h) cancels the destination's session
// through `control`, until the commit point.
void StopDestinationOnSignals(LiveControl& control);

// --demo: both ends on loopback, the destination a child process.
int RunDemo(SessionOptions opt);

// --attach --hand-over: a local migration, the memory handed over.
int RunHandOver();

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_ROLES_H_
