// Migrating the memory of another process, and handing received memory to
// one: four parties over unix sockets, none of them copying a page.
//
//   workload (source)      MemoryExport: registers its shared mappings
//                          (memfd, tmpfs, /dev/shm files) for userfaultfd
//                          write-protect tracking and offers them on a
//                          socket.
//   migration process      AttachedMemory: takes the offer (the memory
//                          fds, the workload's pagemap fd and its
//                          userfaultfd, over SCM_RIGHTS), maps the same
//                          pages read-only, collects the workload's writes
//                          with PAGEMAP_SCAN on the workload's pagemap, and
//                          pauses it for the final round.
//   destination process    HandOverMemory: after the session, passes the
//                          memory it received into (a memfd) to
//   new workload           AdoptedMemory, which maps it and runs on.
//
// Why it works: userfaultfd write-protection lives in the workload's page
// tables, so only the workload can register it; but PAGEMAP_SCAN on a
// pagemap fd acts on the mm that opened it, so whoever holds the
// workload's fd reads (and re-arms) the workload's write bits. The
// migration process never reads through the workload's address space
// (process_vm_readv): it maps the same physical pages.
//
// The socket protocol (proto/memory_handoff.h) is versioned; an offer the
// peer does not understand is refused with a message, never half-used.
#ifndef RAMFERRY_MEMORY_HANDOFF_H_
#define RAMFERRY_MEMORY_HANDOFF_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/region.h"

namespace ramferry {

// A shared mapping of (part of) a file: `base` maps `length` bytes of
// `fd` from `fd_offset`. 4 KiB pages; the fd is only borrowed (the
// receiver of an offer gets its own duplicate).
struct SharedRegion {
  uint32_t id = 0;
  std::string name;
  void* base = nullptr;
  uint64_t length = 0;
  int fd = -1;
  uint64_t fd_offset = 0;
};

// What the workload is told, on the export's own thread.
enum class ExportEvent {
  // Stop every write to the exported memory before returning: the final
  // round follows. Without a handler the migration process stops the
  // whole process (SIGSTOP) instead.
  kPause,
  // The migration failed or was cancelled: writes may go on here.
  kResume,
  // The memory lives at the destination now: never write it here again.
  kMigrated,
  // The migration process went away while the memory was paused. Whether
  // a destination runs on is unknown: resuming risks two live copies.
  kDetachedWhilePaused,
};
absl::string_view ExportEventName(ExportEvent event);

// The workload's side. Listen() registers every region for write
// tracking (async userfaultfd write-protect: writes never wait for the
// migration process; Linux 6.7+), opens /proc/self/pagemap, binds
// `socket_path` (mode 0600: the offer grants write tracking and read
// access to the memory) and serves one migration process at a time on a
// thread of its own. The regions must stay mapped while the export
// lives; destroying it unregisters them. Its handler must not destroy it
// (the thread would wait for itself): that aborts the process with a
// message. The C API's ramferry_export_free defers it instead.
// What a workload allows the migration process that attaches.
struct ExportOptions {
  // Consent to a local hand-over (ramferry-migrate --hand-over): once
  // paused, the attacher may ask for the regions' files READ-WRITE and
  // pass them to a process that runs on with them (AdoptedMemory). Off:
  // the attacher only ever holds read-only reopenings, and a request is
  // refused.
  bool allow_hand_over = false;
};

class MemoryExport {
 public:
  using EventHandler = std::function<void(ExportEvent)>;

  static absl::StatusOr<std::unique_ptr<MemoryExport>> Listen(
      const std::string& socket_path, absl::Span<const SharedRegion> regions,
      EventHandler on_event);
  static absl::StatusOr<std::unique_ptr<MemoryExport>> Listen(
      const std::string& socket_path, absl::Span<const SharedRegion> regions,
      EventHandler on_event, const ExportOptions& options);
  virtual ~MemoryExport() = default;

  // Blocks until the memory was migrated (OK), `timeout` passed
  // (DEADLINE_EXCEEDED) or the export failed.
  virtual absl::Status WaitMigrated(absl::Duration timeout) = 0;
  // CLOCK_MONOTONIC nanoseconds at which the last pause took effect (the
  // handler returned); 0 if never paused.
  virtual int64_t paused_at_ns() const = 0;
  virtual const std::string& socket_path() const = 0;
};

// The migration process's side: the regions the workload offered, mapped
// here (read-only, MAP_SHARED: the workload's own pages).
class AttachedMemory {
 public:
  // Connects to a MemoryExport at `socket_path`, retrying until `timeout`.
  // The exporting process must run as this process's user or as root.
  static absl::StatusOr<std::unique_ptr<AttachedMemory>> Attach(
      const std::string& socket_path, absl::Duration timeout);
  virtual ~AttachedMemory() = default;

  // The offered regions, their bases in THIS process.
  virtual absl::Span<const Region> regions() const = 0;
  // The workload's pid as this process numbers it (never 0: a workload in
  // a pid namespace this process cannot see is refused at Attach). Signals
  // and liveness go through a pidfd, not this number, which may be reused
  // once the workload exits.
  virtual pid_t pid() const = 0;
  // Whether the workload process still exists.
  virtual bool alive() const = 0;
  // Whether the workload handles pauses itself (else SIGSTOP).
  virtual bool pauses_itself() const = 0;

  // ORs the pages the workload wrote since the last call (or since it
  // registered) into `dirty` (one bitmap per region, in regions() order)
  // and re-arms tracking for them, atomically per page. Returns how many
  // pages it reported.
  virtual absl::StatusOr<uint64_t> CollectWritten(
      absl::Span<DirtyBitmap* const> dirty) = 0;

  // Returns once the workload writes no more: its handler returned, or,
  // for one without a handler or that did not answer within `timeout`,
  // the process is stopped (SIGSTOP; every thread, as seen in
  // /proc/PID/stat).
  virtual absl::Status Pause(absl::Duration timeout) = 0;
  // The migration failed: the workload may write again (SIGCONT if it was
  // stopped).
  virtual absl::Status Resume() = 0;
  // The destination holds the memory: the workload must stop for good.
  // A stopped process stays stopped.
  virtual absl::Status Migrated() = 0;
  // Whether the last Pause fell back to SIGSTOP, and why.
  virtual bool stopped_by_signal() const = 0;
  virtual const std::string& pause_note() const = 0;

  // Whether the workload's offer allowed hand-over (ExportOptions).
  virtual bool allows_hand_over() const = 0;
  // While paused, and only if allows_hand_over(): the regions' files,
  // read-write, from the workload (FAILED_PRECONDITION with its reason
  // when it refuses). The descriptors are the caller's; the SharedRegions
  // describe them as the workload maps them (base: its address).
  struct Writable {
    std::vector<SharedRegion> regions;
    std::vector<int> fds;  // owned by the caller: close them
  };
  virtual absl::StatusOr<Writable> RequestWritable(absl::Duration timeout) = 0;
};

// A local migration by hand-over (ramferry-migrate --attach --hand-over):
// no page is copied. The workload at `attach_socket`, which allowed it,
// is paused; its files are asked for read-write and offered, with their
// region ids and sizes (and with `verify` an XXH3-64 digest of each region
// taken here over the paused memory, which the adopter checks), to the
// AdoptedMemory at `adopt_socket`; once it acknowledged, the workload is
// told MIGRATED.
//
// The commit point is the adopter's acknowledgement: any failure before
// it (no adopter within `timeout`, the workload refusing, the adopter
// refusing, a digest mismatch) resumes the workload; after it the memory
// is the adopter's and the workload stays paused. The adopter is
// connected to before the pause, so an absent one costs no pause at all.
struct HandOverOptions {
  absl::Duration attach_timeout = absl::Seconds(10);
  absl::Duration adopt_timeout = absl::Seconds(30);
  absl::Duration pause_timeout = absl::Seconds(1);
  bool verify = false;
};
struct HandOverReport {
  enum class Outcome {
    kMigrated,     // the adopter holds the memory; the workload was told
    kResumed,      // failed before the commit point; the workload runs on
    kNotPaused,    // failed before any pause (refused, no adopter, ...)
    kResumeFailed  // failed before the commit point, and resuming failed
  };
  Outcome outcome = Outcome::kNotPaused;
  absl::Status status;  // why it failed (OK when migrated)
  pid_t workload_pid = 0;
  size_t regions = 0;
  uint64_t bytes = 0;
  std::string pause_method;  // "handler" or "SIGSTOP"
  // CLOCK_MONOTONIC spans, ns: downtime runs from the pause's start to
  // the adopter's acknowledgement (0 where not reached).
  int64_t pause_ns = 0;      // Pause(): until the workload wrote no more
  int64_t grant_ns = 0;      // asking for and receiving the writable files
  int64_t verify_ns = 0;     // digesting the paused memory (verify only)
  int64_t hand_over_ns = 0;  // offer sent to acknowledgement (incl. the
                             // adopter's own digest check)
  int64_t downtime_ns = 0;
  int64_t paused_at_ns = 0;  // when the pause began
};
absl::string_view HandOverOutcomeName(HandOverReport::Outcome outcome);
HandOverReport HandOverAttached(const std::string& attach_socket,
                                const std::string& adopt_socket,
                                const HandOverOptions& options);

// The destination's side: offers `regions` (memory this process received
// into; fds of memfds or files) to an AdoptedMemory listening at
// `socket_path`, and returns once it has mapped them.
absl::Status HandOverMemory(const std::string& socket_path,
                            absl::Span<const SharedRegion> regions,
                            absl::Duration timeout);

// The digest a hand-over with verification carries for a region, and
// that AdoptedMemory checks: XXH3-64 of its bytes.
uint64_t RegionDigest(const void* base, uint64_t length);

// The new workload's side: binds `socket_path` (0600) and waits for
// HandOverMemory.
class AdoptedMemory {
 public:
  static absl::StatusOr<std::unique_ptr<AdoptedMemory>> Listen(
      const std::string& socket_path);
  virtual ~AdoptedMemory() = default;

  // Blocks until memory was handed over (then maps it read-write,
  // MAP_SHARED) or `timeout` passed (DEADLINE_EXCEEDED, naming why the
  // last offer was refused, if one was). An offer that carries region
  // digests is checked against them first and refused (REFUSED, digest
  // mismatch) if any differs.
  virtual absl::Status Wait(absl::Duration timeout) = 0;
  // After Wait: the regions, mapped here, and the fds they map (owned by
  // this object; dup them to keep them).
  virtual absl::Span<const SharedRegion> regions() const = 0;
};

}  // namespace ramferry

#endif  // RAMFERRY_MEMORY_HANDOFF_H_
