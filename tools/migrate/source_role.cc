// ramferry-migrate --role=source: its memory (own or attached), then the
// migration.
#include <cstdio>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "ramferry/pinning.h"
#include "ramferry/region.h"
#include "tools/common/channel_flags.h"
#include "tools/common/link_testbed.h"
#include "tools/migrate/attached_workload.h"
#include "tools/migrate/dirty_tracker.h"
#include "tools/migrate/file_mappers.h"
#include "tools/migrate/flags.h"
#include "tools/migrate/live_control.h"
#include "tools/migrate/memload.h"
#include "tools/migrate/memory_image.h"
#include "tools/migrate/postcopy_mode.h"
#include "tools/migrate/precopy.h"
#include "tools/migrate/region_memory.h"
#include "tools/migrate/report.h"
#include "tools/migrate/roles.h"
#include "tools/migrate/settings.h"
#include "tools/migrate/stop_signals.h"

namespace ramferry::migrate {

namespace {

// --transport=auto: the transport for opt->host, and why (empty when the
// transport was named).
absl::StatusOr<std::string> ChooseFor(SessionOptions* opt) {
  if (!AutoTransport()) return std::string();
  return cli::ChooseTransportFor(opt->host, "ramferry-migrate", opt);
}

// What the source migrates and what writes it: its own memory under
// memload, or the memory another process exported (--attach).
struct SourceMemory {
  std::unique_ptr<RegionMemory> own;
  std::unique_ptr<AttachedWorkload> attached;
  std::vector<Region> regions;  // memload's: one
  std::unique_ptr<DirtyTracker> tracker;
  std::unique_ptr<Memload> memload;
  uint64_t bytes() const {
    uint64_t b = 0;
    for (const Region& r : regions) b += r.length;
    return b;
  }
  Workload* workload = nullptr;
  std::string untracked_writers;  // see RunDescription
};

// A --region-file that other processes map: refused (ABORTED, exit 2)
// unless --allow-foreign-writers; then who maps it, for the report.
absl::StatusOr<std::string> CheckForeignWriters(const std::string& file) {
  RAMFERRY_ASSIGN_OR_RETURN(std::vector<FileMapper> others,
                            OtherProcessesMapping(file));
  if (others.empty()) return std::string();
  const std::string who = DescribeMappers(others);
  if (!absl::GetFlag(FLAGS_allow_foreign_writers)) {
    return absl::AbortedError(absl::StrFormat(
        "refusing to start: other processes map %s (%s). Their writes would "
        "be invisible to the dirty tracking (userfaultfd write-protection "
        "is per address space), so the destination would not match. Stop "
        "them, have the writer export its memory (--attach), or pass "
        "--allow-foreign-writers if they do not write.",
        file, who));
  }
  std::fprintf(stderr,
               "ramferry-migrate: WARNING: other processes map %s (%s); "
               "their writes are not tracked, only verification checks "
               "them\n",
               file.c_str(), who.c_str());
  return who;
}

absl::StatusOr<SourceMemory> OwnSourceMemory(absl::Duration* prepare) {
  absl::Time prepare_start = absl::Now();
  SourceMemory src;
  const std::string file = absl::GetFlag(FLAGS_region_file);
  if (!file.empty()) {
    RAMFERRY_ASSIGN_OR_RETURN(std::string who, CheckForeignWriters(file));
    src.untracked_writers = who;
  }
  absl::StatusOr<std::unique_ptr<RegionMemory>> m =
      file.empty() ? RegionMemory::Anonymous(absl::GetFlag(FLAGS_size).bytes[0])
                   : RegionMemory::OpenFile(file);
  if (!m.ok()) {
    return absl::InvalidArgumentError(m.status().message());
  }
  src.own = std::move(*m);
  // memload's one-time fill (a file keeps the content it has).
  if (!src.own->file_backed()) {
    *prepare += absl::Now() - prepare_start;
    absl::StatusOr<MemoryImage> image =
        MemoryImage::Parse(absl::GetFlag(FLAGS_image));
    if (!image.ok()) {
      return absl::InvalidArgumentError(image.status().message());
    }
    FillImage(src.own->data(),
              PlanImage(src.own->size() / kPageSize, *image,
                        absl::GetFlag(FLAGS_seed)),
              absl::GetFlag(FLAGS_seed));
    prepare_start = absl::Now();
  }
  src.regions = {
      Region{1, RegionName(0), src.own->data(), src.own->size(), kPageSize}};
  // A file's pages go through it, not through this mapping
  // (engine/pages/region_file.h).
  src.regions[0].fd = src.own->fd();
  switch (absl::GetFlag(FLAGS_dirty_tracking)) {
    case DirtyTracking::kUffd: {
      absl::StatusOr<std::unique_ptr<DirtyTracker>> t =
          MakeUffdWpTracker(src.own->data(), src.own->size());
      if (!t.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("dirty tracking: ", t.status().message()));
      }
      src.tracker = std::move(*t);
      break;
    }
    case DirtyTracking::kBitmap:
      src.tracker = MakeBitmapTracker(src.regions[0].page_count());
      break;
  }
  Memload::Options lo;
  lo.dirty_set_pages = absl::GetFlag(FLAGS_dirty_set).bytes / kPageSize;
  lo.pages_per_second = DirtyPagesPerSecond(src.own->file_backed());
  lo.writers = absl::GetFlag(FLAGS_writers);
  lo.seed = absl::GetFlag(FLAGS_seed);
  lo.whole_pages = absl::GetFlag(FLAGS_dirty_write) == DirtyWrite::kPage;
  src.memload = std::make_unique<Memload>(
      src.own->data(), src.regions[0].page_count(), lo, src.tracker.get());
  src.memload->Start();
  src.workload = src.memload.get();
  *prepare += absl::Now() - prepare_start;
  return src;
}

// --attach: the exported memory, its writes and its pauses are the other
// process's; nothing here writes.
absl::StatusOr<SourceMemory> AttachedSourceMemory(absl::Duration* prepare) {
  const absl::Time prepare_start = absl::Now();
  SourceMemory src;
  RAMFERRY_ASSIGN_OR_RETURN(
      std::unique_ptr<AttachedWorkload> a,
      AttachedWorkload::Attach(absl::GetFlag(FLAGS_attach),
                               absl::GetFlag(FLAGS_connect_timeout),
                               absl::GetFlag(FLAGS_attach_pause_timeout)));
  src.attached = std::move(a);
  src.regions = src.attached->regions(RegionName);
  src.tracker = src.attached->MakeTracker();
  src.workload = src.attached.get();
  *prepare += absl::Now() - prepare_start;
  return src;
}

// A stop signal (stop_signals.h) is a cancel under the commit point's
// rule; before the session, the process just ends (nothing to undo, its
// workload never paused); and it may be ended without its clean path only
// while no workload is paused (an attached one would stay paused for
// good).
void StopOnSignals(LiveControl& control) {
  stop_signals::SetRole(
      {.stop =
           [&control](int sig) {
             const std::string name = stop_signals::Name(sig);
             absl::Status s = control.CancelWith(absl::CancelledError(
                 absl::StrCat("interrupted by ", name,
                              " on the source before the commit point: the "
                              "source keeps its workload and the "
                              "destination discards what it received")));
             if (!s.ok()) {
               std::fprintf(stderr,
                            "ramferry-migrate: %s came after the commit "
                            "point: the migration goes on to its end (a "
                            "second %s ends it now)\n",
                            name.c_str(), name.c_str());
             }
           },
       .may_force =
           [&control] {
             const MigrationState s = control.state();
             return s != MigrationState::kStopAndCopy &&
                    s != MigrationState::kPostcopy &&
                    s != MigrationState::kVerifying;
           },
       .unstarted =
           [&control] { return control.state() == MigrationState::kSetup; }});
}

// The last line after a stop signal: where it found the migration, and
// so where the workload is.
std::string InterruptedLine(int sig, const PrecopyReport& r) {
  const std::string name = stop_signals::Name(sig);
  if (r.status.ok()) {
    return absl::StrCat(name,
                        " came after the commit point: the migration "
                        "completed, and the destination runs the workload");
  }
  if (r.workload_kept_paused) {
    return absl::StrCat(name,
                        " came after the commit point and the migration "
                        "failed after it: the workload stays paused here "
                        "(the destination may run it)");
  }
  if (r.switchover.empty()) {
    return absl::StrCat("interrupted by ", name,
                        " before the commit point: the workload was never "
                        "paused and runs on");
  }
  return absl::StrCat("interrupted by ", name,
                      " before the commit point: the workload was resumed");
}

}  // namespace

int RunSourceRole(SessionOptions opt, const FetchPeerReport& fetch_peer,
                  const cli::LinkTestbed* links) {
  absl::StatusOr<std::string> transport_reason = ChooseFor(&opt);
  if (!transport_reason.ok()) {
    return Usage(std::string(transport_reason.status().message()));
  }
  absl::StatusOr<ConvergenceConfig> convergence = Convergence();
  if (!convergence.ok()) {
    return Usage(std::string(convergence.status().message()));
  }
  // --control is served from the start, so an orchestrator sees the
  // set-up (memory, connection) as well.
  LiveControl control(LiveControl::Role::kSource,
                      {opt.max_bandwidth, *convergence},
                      {.postcopy = PostcopyFlag() != PostcopyMode::kOff,
                       .throttle = absl::GetFlag(FLAGS_attach).empty()});
  StopOnSignals(control);
  // Before `control` goes.
  absl::Cleanup no_stop_role = [] { stop_signals::ClearRole(); };
  absl::StatusOr<std::unique_ptr<cli::ControlServer>> server =
      ControlFromFlag(control);
  if (!server.ok()) return Usage(std::string(server.status().message()));
  // Mapping the memory and arming the dirty tracking are part of the
  // migration's cost (a file's pages are mapped in here); the one-time
  // random fill of anonymous memory is the workload's, not the migration's.
  absl::Duration prepare;
  absl::StatusOr<SourceMemory> src = absl::GetFlag(FLAGS_attach).empty()
                                         ? OwnSourceMemory(&prepare)
                                         : AttachedSourceMemory(&prepare);
  if (!src.ok()) {
    control.Finished(src.status(), false, Json::object());
    if (absl::IsInvalidArgument(src.status())) {
      return Usage(std::string(src.status().message()));
    }
    std::fprintf(stderr, "ramferry-migrate: %s\n",
                 std::string(src.status().message()).c_str());
    return absl::IsAborted(src.status()) ? 2 : 1;
  }
  if (absl::Status s = CheckPinningLimits(opt, kPageSize, src->bytes());
      !s.ok()) {
    control.Finished(s, false, Json::object());
    std::fprintf(stderr, "ramferry-migrate: refusing to start: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  const absl::Time prepare_start = absl::Now();
  PrecopyConfig config;
  config.session = opt;
  config.convergence = *convergence;
  config.verify = absl::GetFlag(FLAGS_verify) != VerifyFlag::kOff;
  config.postcopy = PostcopyFlag();
  config.on_timeout = TimeoutActionFlag();
  config.resume_timeout = opt.postcopy_resume_timeout;
  config.progress = !absl::GetFlag(FLAGS_json);
  // Nobody else maps the memory (an attached workload's memfd can be
  // written past its pause), so the pause stops every writer; and with no
  // writer running, it does not change at all.
  config.pause_freezes =
      src->attached == nullptr && src->untracked_writers.empty();
  config.memory_frozen = config.pause_freezes && !src->workload->running();
  config.control = &control;
  prepare += absl::Now() - prepare_start;
  PrecopyReport r =
      RunPrecopy(config, src->regions, *src->tracker, *src->workload);
  r.prepare_s = absl::ToDoubleSeconds(prepare);
  RunDescription run = Describe(opt, src->bytes(), src->tracker->name());
  run.untracked_writers = src->untracked_writers;
  if (src->attached != nullptr) {
    run.region = src->attached->Describe();
    run.attached = run.region;
    run.pause_method = src->attached->pause_method();
    run.pause_note = src->attached->pause_note();
    run.image = "the workload's";
    run.dirty_set_bytes = 0;
    run.dirty_rate_bytes_per_s = 0;
    run.writers = 0;
  }
  run.transport_reason = *transport_reason;
  // The cap in force at the end: a control client may have set another.
  run.max_bandwidth = control.settings().max_bandwidth;
  for (size_t i = 0; links != nullptr && i < links->links(); ++i) {
    run.link_rates.emplace_back(links->destination_address(i), links->rate(i));
  }
  const PeerReport peer = fetch_peer ? fetch_peer(r.connected) : PeerReport{};
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", SourceJson(run, r, peer.json).c_str());
  } else {
    std::printf("%s%s", SourceTable(run, r).c_str(), peer.table.c_str());
  }
  const int sig = stop_signals::Received();
  if (sig != 0) {
    std::fflush(stdout);
    std::fprintf(stderr, "ramferry-migrate: %s\n",
                 InterruptedLine(sig, r).c_str());
  }
  if (r.status.ok() && (r.verified || !config.verify)) return 0;
  return sig != 0 ? 128 + sig : 1;
}

}  // namespace ramferry::migrate
