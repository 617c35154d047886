// ramferry-migrate --role=dest: its memory, the session it serves, the
// hand-over.
#include <cstdio>
#include <optional>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "ramferry/memory_handoff.h"
#include "ramferry/region.h"
#include "tools/migrate/destination.h"
#include "tools/migrate/flags.h"
#include "tools/migrate/memload.h"
#include "tools/migrate/postcopy_mode.h"
#include "tools/migrate/region_memory.h"
#include "tools/migrate/report.h"
#include "tools/migrate/roles.h"
#include "tools/migrate/settings.h"
#include "tools/migrate/stop_signals.h"

namespace ramferry::migrate {

// Anonymous memory (huge pages), a file, or for --export a memfd another
// process can adopt.
absl::StatusOr<DestinationMemories> DestinationMemory(const std::string& file) {
  const std::vector<uint64_t> sizes = absl::GetFlag(FLAGS_size).bytes;
  if (!file.empty() && sizes.size() != 1) {
    return absl::InvalidArgumentError(
        "--region-file is one region: give --size one size");
  }
  DestinationMemories mems;
  for (const uint64_t bytes : sizes) {
    absl::StatusOr<std::unique_ptr<RegionMemory>> m =
        !file.empty() ? RegionMemory::CreateFile(file, bytes)
        : !absl::GetFlag(FLAGS_export).empty()
            ? RegionMemory::Memfd(bytes)
            : RegionMemory::Anonymous(bytes, /*huge_pages=*/true);
    if (!m.ok()) return m.status();
    mems.push_back(*std::move(m));
  }
  return mems;
}

// --export: a migrated destination hands its memory to the process
// waiting on the socket. Nothing is handed over after a failed session.
void HandOver(const DestinationMemories& mems, DestinationReport* r) {
  const std::string path = absl::GetFlag(FLAGS_export);
  if (path.empty() || !r->status.ok()) return;
  r->exported_to = path;
  const absl::Time start = absl::Now();
  std::vector<SharedRegion> regions;
  for (size_t i = 0; i < mems.size(); ++i) {
    regions.push_back({static_cast<uint32_t>(i + 1), RegionName(i),
                       mems[i]->data(), mems[i]->size(), mems[i]->fd(), 0});
  }
  r->status =
      HandOverMemory(path, regions, absl::GetFlag(FLAGS_export_timeout));
  r->handover_s = absl::ToDoubleSeconds(absl::Now() - start);
  r->handed_over = r->status.ok();
  if (!r->status.ok()) {
    r->status = absl::Status(r->status.code(),
                             absl::StrCat("migrated, but not handed over to ",
                                          path, ": ", r->status.message()));
  }
}

// The destination's regions: memory it just mapped reads as zero (fresh
// anonymous memory, a new or resized file), so zero pages for it need no
// write; a reused file holds what the last run left.
std::vector<Region> DestinationRegions(const DestinationMemories& mems) {
  std::vector<Region> regions;
  for (size_t i = 0; i < mems.size(); ++i) {
    Region region{static_cast<uint32_t>(i + 1), RegionName(i), mems[i]->data(),
                  mems[i]->size(), kPageSize};
    region.reads_as_zero = !mems[i]->reused_file();
    region.fd = mems[i]->fd();
    regions.push_back(std::move(region));
  }
  return regions;
}

// --prefault=auto, per memory kind, from the measurements in docs/migrate.md
// (4 GiB, 2 channels, loopback): anonymous memory (huge pages) gains from
// a background pre-fault beside the receivers; a file's pages are written
// through the file (Region::fd), so its page tables here are never needed.
absl::StatusOr<Prefault> DestinationPrefault(const RegionMemory& mem) {
  if (const std::optional<Prefault> flag = absl::GetFlag(FLAGS_prefault).mode) {
    return *flag;
  }
  // Post-copy drops the pages it lacks at the switch: a background
  // pre-fault must be over by then, so it runs before listening; with
  // --postcopy=now every page is dropped, so none is faulted in at all.
  if (PostcopyFlag() == PostcopyMode::kNow) return Prefault::kOff;
  if (PostcopyFlag() != PostcopyMode::kOff) return Prefault::kBefore;
  // A file's pages land through it (Region::fd), never through this
  // process's page tables: filling those would be all cost.
  return mem.file_backed() ? Prefault::kOff : Prefault::kDuring;
}

// Post-copy's destination workload: memload as the source runs it (the
// same flags, so give both ends the same), from the switch on.
std::optional<Memload::Options> DestinationWorkload() {
  if (PostcopyFlag() == PostcopyMode::kOff) return std::nullopt;
  Memload::Options lo;
  lo.dirty_set_pages = absl::GetFlag(FLAGS_dirty_set).bytes / kPageSize;
  lo.pages_per_second = DirtyPagesPerSecond(/*file_backed=*/false);
  lo.writers = absl::GetFlag(FLAGS_writers);
  lo.seed = absl::GetFlag(FLAGS_seed);
  return lo;
}

void StopDestinationOnSignals(LiveControl& control) {
  stop_signals::SetRole({.stop = [&control](int sig) {
    const std::string name = stop_signals::Name(sig);
    absl::Status s = control.CancelWith(absl::CancelledError(absl::StrCat(
        "interrupted by ", name,
        " on the destination before the commit point: it discards what it "
        "received, and the source keeps its workload")));
    if (!s.ok()) {
      std::fprintf(stderr,
                   "ramferry-migrate: destination: %s came after the commit "
                   "point: the session goes on to its end (a second %s ends "
                   "it now)\n",
                   name.c_str(), name.c_str());
    }
  }});
}

int RunDestRole(SessionOptions opt) {
  LiveControl control(LiveControl::Role::kDestination, {}, {});
  StopDestinationOnSignals(control);
  // Before `control` goes.
  absl::Cleanup no_stop_role = [] { stop_signals::ClearRole(); };
  absl::StatusOr<std::unique_ptr<cli::ControlServer>> server =
      ControlFromFlag(control);
  if (!server.ok()) return Usage(std::string(server.status().message()));
  absl::StatusOr<DestinationMemories> mem =
      DestinationMemory(absl::GetFlag(FLAGS_region_file));
  if (!mem.ok()) return Usage(std::string(mem.status().message()));
  // Every region is of one kind: the first speaks for all.
  absl::StatusOr<Prefault> prefault = DestinationPrefault(*mem->front());
  if (!prefault.ok()) return Usage(std::string(prefault.status().message()));
  const std::vector<Region> regions = DestinationRegions(*mem);
  const bool json = absl::GetFlag(FLAGS_json);
  DestinationReport r = RunDestination(
      opt, regions, *prefault, !json,
      [&](uint16_t port) {
        std::fprintf(stderr, "ramferry-migrate: listening on %s:%d\n",
                     opt.host.c_str(), port);
      },
      DestinationWorkload(), &control,
      /*publish_rounds=*/*server != nullptr);
  HandOver(*mem, &r);
  std::printf("%s\n",
              json ? DestinationJson(r).c_str() : DestinationTable(r).c_str());
  // Verification is the source's (--verify); the destination's part is to
  // have applied every round and seen FINISH confirmed.
  if (r.status.ok()) return 0;
  const int sig = stop_signals::Received();
  return sig != 0 ? 128 + sig : 1;
}

}  // namespace ramferry::migrate
