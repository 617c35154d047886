// AttachedMemory (ramferry/memory_handoff.h): the migration process's side.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/owned_fd.h"
#include "base/proc_maps.h"
#include "base/status_macros.h"
#include "base/status_util.h"
#include "handoff/handoff_io.h"
#include "handoff/shared_mapping.h"
#include "handoff/unix_seqpacket.h"
#include "handoff/write_tracking.h"
#include "proto/memory_handoff.h"
#include "ramferry/memory_handoff.h"

namespace ramferry {
namespace {

using base::OwnedFd;
using proto::CommandMessage;
using proto::HandoffCommand;

// What /proc/self/fd/N names: how a received descriptor is told apart
// from what the offer says it is.
std::string FdTarget(int fd) {
  std::error_code ec;
  const std::filesystem::path p =
      std::filesystem::read_symlink(absl::StrCat("/proc/self/fd/", fd), ec);
  return ec ? std::string() : p.string();
}

// Whether `pid` lives in this process's pid namespace: only then does the
// pid in its pagemap's name mean the same process here.
bool SamePidNamespace(pid_t pid) {
  struct stat mine, theirs;
  return stat("/proc/self/ns/pid", &mine) == 0 &&
         stat(absl::StrCat("/proc/", pid, "/ns/pid").c_str(), &theirs) == 0 &&
         mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino;
}

// The pagemap must be the workload's own (its writes, not another
// process's). Its name says which process opened it as numbered in the
// /proc it came from, which is this one's only in the same pid namespace
// (a containerized workload's /proc numbers its own).
absl::Status CheckPagemap(int fd, pid_t peer) {
  const std::string target = FdTarget(fd);
  const std::string own = absl::StrCat("/proc/", peer, "/pagemap");
  if (target == own) return absl::OkStatus();
  const bool is_pagemap =
      absl::StartsWith(target, "/proc/") && absl::EndsWith(target, "/pagemap");
  if (is_pagemap && !SamePidNamespace(peer)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "the memory offer's pagemap is %s, not the offering process's (%s)",
      target.empty() ? "not a file" : target, own));
}

// A task's state letter, from its /proc/.../stat ("tid (comm) S ...",
// where comm may hold spaces and parentheses); 0 if it is gone.
char TaskState(const std::filesystem::path& task) {
  std::ifstream stat(task / "stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return 0;
  return line[close + 2];
}

// An exited thread: a group leader that called pthread_exit stays a
// zombie (Z) while the group's other threads run, with no address space
// of its own to read through.
bool Exited(char state) { return state == 'Z' || state == 'X'; }

// Which live thread of `peer` still runs ("thread TID in state S"), or
// nullopt once every one is stopped (state T or t) and one is. A thread
// that exited cannot run and is not waited for. /proc goes by the
// number: it is still the peer's if the peer lives after the read, since
// a pid is reused only once its process is gone.
std::optional<std::string> RunningThread(const handoff::PeerProcess& peer) {
  std::error_code ec;
  bool any = false;
  for (const auto& task : std::filesystem::directory_iterator(
           absl::StrCat("/proc/", peer.pid, "/task"), ec)) {
    const char state = TaskState(task.path());
    if (state == 0 || Exited(state)) continue;
    if (state != 'T' && state != 't') {
      return absl::StrCat("thread ", task.path().filename().string(),
                          " in state ", std::string(1, state));
    }
    any = true;
  }
  if (!any) return "no thread found";
  if (!handoff::SignalPeer(peer, 0).ok()) return "the process has gone";
  return std::nullopt;
}

// Where the workload's address space can be read: /proc/PID of its group
// leader, unless the leader has exited (pthread_exit), whose maps are
// then empty; then one of the threads still running.
std::string AddressSpaceDir(pid_t pid) {
  std::string leader = absl::StrCat("/proc/", pid);
  if (!Exited(TaskState(leader))) return leader;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator(leader + "/task", ec)) {
    const char state = TaskState(task.path());
    if (state != 0 && !Exited(state)) return task.path().string();
  }
  return leader;
}

// The workload's own ranges, [base, base + length) in its address space.
struct RemoteRange {
  uint32_t id;
  uint64_t base, length;
};

// Checks that each of `ranges` lies in mappings of the workload, by its
// /proc/PID/maps; with `registered`, by its smaps, that each of those
// mappings is also registered for userfaultfd write protection ("uw" in
// VmFlags). PAGEMAP_SCAN reports nothing, and no error, for an address
// that is not mapped: without this, an offer of ranges the workload does
// not track, or a region it later unmapped or moved, would report no
// writes at all.
absl::Status CheckRanges(const handoff::PeerProcess& peer,
                         absl::Span<const RemoteRange> ranges,
                         bool registered) {
  const std::string path =
      AddressSpaceDir(peer.pid) + (registered ? "/smaps" : "/maps");
  struct Vma {
    uint64_t start, end;
    bool tracked;
  };
  std::vector<Vma> vmas;
  absl::StatusOr<std::string> text = base::ReadProcFile(path);
  // Read while the pidfd's process lives: then its pid was not reused.
  if (absl::Status s = handoff::SignalPeer(peer, 0); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrFormat("the workload's writes (pid %d): it has "
                                  "gone (%s); did it end, or free its export?",
                                  peer.pid, s.message()));
  }
  if (!text.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot read ", path, ": ", text.status().message()));
  }
  if (absl::Status s = base::ForEachMapping(
          *text, registered ? base::MapsFile::kSmaps : base::MapsFile::kMaps,
          path,
          [&](const base::MapsEntry& e) {
            vmas.push_back(
                {e.start, e.end,
                 !registered || absl::StrContains(e.vm_flags, " uw ")});
            return true;
          });
      !s.ok()) {
    return base::Annotate(
        s, absl::StrFormat("the workload's writes (pid %d)", peer.pid));
  }
  if (vmas.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot read ", path));
  }
  for (const RemoteRange& r : ranges) {
    uint64_t at = r.base;
    for (const Vma& v : vmas) {
      if (v.end <= at || v.start > at) continue;
      if (!v.tracked) break;
      at = v.end;
      if (at >= r.base + r.length) break;
    }
    if (at < r.base + r.length) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the workload's region %d: [%#x, %#x) is %s at %#x in pid %d, so "
          "its writes cannot be tracked (%s)",
          r.id, r.base, r.base + r.length,
          registered ? "not mapped, or not registered for write tracking,"
                     : "no longer mapped",
          at, peer.pid,
          registered ? "an export registers what it offers; this offer is "
                       "not what it seems"
                     : "did it unmap or move its memory?"));
    }
  }
  return absl::OkStatus();
}

class AttachedMemoryImpl final : public AttachedMemory {
 public:
  AttachedMemoryImpl(OwnedFd conn, handoff::PeerProcess peer,
                     uint32_t offer_flags, OwnedFd pagemap,
                     std::vector<handoff::SharedMapping> maps,
                     std::vector<OwnedFd> files, std::vector<Region> regions,
                     std::vector<uint64_t> remote_bases)
      : conn_(std::move(conn)),
        peer_(std::move(peer)),
        pauses_itself_((offer_flags & proto::kOfferPausesItself) != 0),
        allows_hand_over_((offer_flags & proto::kOfferAllowsHandOver) != 0),
        pagemap_(std::move(pagemap)),
        maps_(std::move(maps)),
        files_(std::move(files)),
        regions_(std::move(regions)) {
    for (size_t i = 0; i < regions_.size(); ++i) {
      written_.emplace_back(pagemap_.get(), remote_bases[i],
                            regions_[i].length);
      ranges_.push_back({regions_[i].id, remote_bases[i], regions_[i].length});
    }
  }

  // Each region's file still holds the whole region: a workload that
  // shrank one under the mapping has lost those pages itself, and reading
  // them here would fault (SIGBUS), so the migration ends with the cause
  // first. Between two collects it is a round's race, which the file path
  // (pread: a short read, not a fault) narrows further.
  absl::Status CheckFileSizes() const {
    for (size_t i = 0; i < regions_.size(); ++i) {
      struct stat st;
      if (fstat(files_[i].get(), &st) != 0) {
        return base::ErrnoStatus(
            errno, absl::StrCat("fstat of region ", regions_[i].id, "'s file"));
      }
      const uint64_t end = regions_[i].fd_offset + regions_[i].length;
      if (static_cast<uint64_t>(st.st_size) < end) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "the workload (pid %d) shrank region %d's file to %d bytes, "
            "below the %d its offer maps: those pages are gone",
            peer_.pid, regions_[i].id, st.st_size, end));
      }
    }
    return absl::OkStatus();
  }

  absl::Span<const RemoteRange> ranges() const { return ranges_; }
  const handoff::PeerProcess& peer() const { return peer_; }

  absl::Span<const Region> regions() const override { return regions_; }
  pid_t pid() const override { return peer_.pid; }
  bool alive() const override { return handoff::SignalPeer(peer_, 0).ok(); }
  bool pauses_itself() const override { return pauses_itself_; }
  bool stopped_by_signal() const override { return stopped_; }
  const std::string& pause_note() const override { return note_; }

  absl::StatusOr<uint64_t> CollectWritten(
      absl::Span<DirtyBitmap* const> dirty) override {
    if (dirty.size() != regions_.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%d bitmaps for %d attached regions", dirty.size(), regions_.size()));
    }
    // Still where they were offered: see CheckRanges.
    RAMFERRY_RETURN_IF_ERROR(CheckRanges(peer_, ranges_, /*registered=*/false));
    RAMFERRY_RETURN_IF_ERROR(CheckFileSizes());
    uint64_t total = 0;
    for (size_t i = 0; i < regions_.size(); ++i) {
      if (dirty[i]->pages() != regions_[i].page_count()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "bitmap %d has %d pages; region %d has %d", i, dirty[i]->pages(),
            regions_[i].id, regions_[i].page_count()));
      }
      absl::StatusOr<uint64_t> n = written_[i].Collect(*dirty[i]);
      if (!n.ok()) {
        return absl::Status(
            n.status().code(),
            absl::StrFormat("the workload's writes (pid %d): %s; did it end, "
                            "or free its export?",
                            peer_.pid, n.status().message()));
      }
      total += *n;
    }
    return total;
  }

  absl::Status Pause(absl::Duration timeout) override {
    if (paused_) return absl::OkStatus();
    note_.clear();
    if (pauses_itself_) {
      absl::Status s =
          Command(HandoffCommand::kPause, HandoffCommand::kPaused, timeout);
      if (s.ok()) {
        paused_ = true;
        return s;
      }
      note_ = absl::StrCat("the workload did not pause itself (", s.message(),
                           "): stopped with SIGSTOP");
    } else {
      note_ = "the workload has no pause handler: stopped with SIGSTOP";
    }
    return StopBySignal(timeout);
  }

  absl::Status Resume() override {
    if (!paused_) return absl::OkStatus();
    paused_ = false;
    if (stopped_) {
      stopped_ = false;
      RAMFERRY_RETURN_IF_ERROR(handoff::SignalPeer(peer_, SIGCONT));
      // A pause the handler answered late is still in force there.
      if (pauses_itself_ && late_pause_) {
        return Command(HandoffCommand::kResume, HandoffCommand::kResumed,
                       absl::Seconds(10));
      }
      return absl::OkStatus();
    }
    return Command(HandoffCommand::kResume, HandoffCommand::kResumed,
                   absl::Seconds(10));
  }

  bool allows_hand_over() const override { return allows_hand_over_; }

  absl::StatusOr<Writable> RequestWritable(absl::Duration timeout) override {
    if (!allows_hand_over_) {
      return absl::FailedPreconditionError(
          proto::RefusalReasonText(proto::RefusalReason::kNotAllowed));
    }
    if (!paused_ || stopped_) {
      return absl::FailedPreconditionError(
          "the workload's files are asked for only while its handler has "
          "paused it (Pause first; a workload stopped with SIGSTOP cannot "
          "answer)");
    }
    RAMFERRY_RETURN_IF_ERROR(
        handoff::SendCommand(conn_.get(), HandoffCommand::kHandOverRequest));
    absl::StatusOr<handoff::ReceivedCommand> c =
        handoff::ReceiveCommandWithFds(conn_.get(), timeout);
    if (!c.ok()) {
      return base::Annotate(c.status(), absl::StrCat("the workload (pid ",
                                                     peer_.pid, ")'s grant"));
    }
    if (c->command.type == HandoffCommand::kRefused) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the workload (pid ", peer_.pid, ") refused: ",
          proto::RefusalReasonText(
              static_cast<proto::RefusalReason>(c->command.value))));
    }
    if (c->command.type != HandoffCommand::kHandOverGrant ||
        c->fds.size() != regions_.size()) {
      return absl::InternalError(absl::StrFormat(
          "the workload answered %s with %d descriptors to HAND_OVER_REQUEST "
          "for %d regions",
          proto::HandoffCommandName(c->command.type), c->fds.size(),
          regions_.size()));
    }
    return CheckGranted(std::move(c->fds));
  }

  absl::Status Migrated() override {
    // Read by the workload when it next runs (a stopped one stays so).
    return handoff::SendCommand(conn_.get(), HandoffCommand::kMigrated);
  }

 private:
  // Sends `cmd` and waits for `want`, skipping a PAUSED that a handler
  // sent after its pause had timed out.
  absl::Status Command(HandoffCommand cmd, HandoffCommand want,
                       absl::Duration timeout) {
    RAMFERRY_RETURN_IF_ERROR(handoff::SendCommand(conn_.get(), cmd));
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      absl::StatusOr<CommandMessage> c =
          handoff::ReceiveCommand(conn_.get(), deadline - absl::Now());
      if (!c.ok()) {
        if (cmd == HandoffCommand::kPause &&
            absl::IsDeadlineExceeded(c.status())) {
          late_pause_ = true;
        }
        return base::Annotate(
            c.status(), absl::StrCat("the workload (pid ", peer_.pid, ")"));
      }
      if (c->type == want) return absl::OkStatus();
      if (c->type == HandoffCommand::kPaused && late_pause_) {
        late_pause_ = false;
        continue;
      }
      return absl::InternalError(absl::StrFormat(
          "the workload answered %s to %s", proto::HandoffCommandName(c->type),
          proto::HandoffCommandName(cmd)));
    }
  }

  // The granted files must be the very files offered (a workload that
  // granted others would hand over memory nobody migrated), open
  // read-write (an adopter maps them so).
  absl::StatusOr<Writable> CheckGranted(std::vector<OwnedFd> fds) {
    Writable out;
    for (size_t i = 0; i < fds.size(); ++i) {
      struct stat got, offered;
      if (fstat(fds[i].get(), &got) != 0 ||
          fstat(files_[i].get(), &offered) != 0 ||
          got.st_dev != offered.st_dev || got.st_ino != offered.st_ino) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "the workload (pid %d) granted for region %d a file that is not "
            "the one it offered",
            peer_.pid, regions_[i].id));
      }
      if ((fcntl(fds[i].get(), F_GETFL) & O_ACCMODE) != O_RDWR) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "the workload (pid %d) granted region %d's file without write "
            "access",
            peer_.pid, regions_[i].id));
      }
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      const Region& r = regions_[i];
      // Where this process maps the region, as a destination's hand-over
      // offers its own mapping: the adopter maps the file afresh.
      out.regions.push_back(
          {r.id, r.name, r.base, r.length, fds[i].get(), r.fd_offset});
      out.fds.push_back(fds[i].Release());
    }
    return out;
  }

  absl::Status StopBySignal(absl::Duration timeout) {
    RAMFERRY_RETURN_IF_ERROR(handoff::SignalPeer(peer_, SIGSTOP));
    stopped_ = true;
    paused_ = true;
    // The signal is delivered to each thread as it next enters the kernel;
    // until every one has stopped, one may still be storing.
    const absl::Time deadline =
        absl::Now() + std::max(timeout, absl::Seconds(1));
    while (std::optional<std::string> running = RunningThread(peer_)) {
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "pid %d did not stop within %s of SIGSTOP (%s)", peer_.pid,
            absl::FormatDuration(std::max(timeout, absl::Seconds(1))),
            *running));
      }
      absl::SleepFor(absl::Microseconds(200));
    }
    return absl::OkStatus();
  }

  const OwnedFd conn_;
  const handoff::PeerProcess peer_;
  const bool pauses_itself_;
  const bool allows_hand_over_;
  const OwnedFd pagemap_;
  const std::vector<handoff::SharedMapping> maps_;
  // Each region's memfd (Region::fd): its pages are read through it.
  const std::vector<OwnedFd> files_;
  const std::vector<Region> regions_;
  std::vector<handoff::WrittenPages> written_;
  std::vector<RemoteRange> ranges_;
  bool paused_ = false;
  bool stopped_ = false;
  bool late_pause_ = false;  // a PAUSE timed out; its PAUSED may follow
  std::string note_;
};

// The offered regions mapped here read-only, with the files they map.
struct MappedOffer {
  std::vector<handoff::SharedMapping> maps;
  std::vector<OwnedFd> files;
  std::vector<Region> regions;
  std::vector<uint64_t> remote_bases;
};

absl::StatusOr<MappedOffer> MapOffer(handoff::ReceivedOffer& p) {
  MappedOffer out;
  for (size_t i = 0; i < p.offer.regions.size(); ++i) {
    const proto::OfferedRegion& r = p.offer.regions[i];
    OwnedFd& fd = p.fds[proto::kExportFixedFds + i];
    // No seal against shrinking: a seal outlives the migration (the
    // workload could never shrink its file again), and the read-only
    // descriptor an export sends cannot add one. A shrunk file is caught
    // at each collect instead (CheckFileSizes).
    absl::StatusOr<handoff::SharedMapping> m = handoff::SharedMapping::Map(
        fd.get(), r.fd_offset, r.length, /*writable=*/false);
    if (!m.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("offered region ", r.id, ": ", m.status().message()));
    }
    Region region;
    region.id = r.id;
    region.name = r.name.empty() ? absl::StrCat("region", r.id) : r.name;
    region.base = m->data();
    region.length = r.length;
    region.fd = fd.get();
    region.fd_offset = r.fd_offset;
    out.regions.push_back(std::move(region));
    out.remote_bases.push_back(r.base);
    out.maps.push_back(*std::move(m));
    out.files.push_back(std::move(fd));
  }
  return out;
}

// Every offered range registered for write tracking in the workload, and
// the scan probed: an offer that is not what it says fails here, not in
// the first round. What the probe reports is sent by round 0.
absl::Status ProbeTracking(AttachedMemoryImpl& attached) {
  RAMFERRY_RETURN_IF_ERROR(
      CheckRanges(attached.peer(), attached.ranges(), /*registered=*/true));
  std::vector<DirtyBitmap> probe;
  std::vector<DirtyBitmap*> ptrs;
  probe.reserve(attached.regions().size());
  ptrs.reserve(attached.regions().size());
  for (const Region& r : attached.regions()) {
    probe.emplace_back(r.page_count());
  }
  for (DirtyBitmap& b : probe) ptrs.push_back(&b);
  return attached.CollectWritten(ptrs).status();
}

}  // namespace

absl::StatusOr<std::unique_ptr<AttachedMemory>> AttachedMemory::Attach(
    const std::string& socket_path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<OwnedFd> conn =
      handoff::ConnectSeqpacket(socket_path, timeout);
  if (!conn.ok()) return conn.status();
  absl::StatusOr<handoff::PeerProcess> peer = handoff::Peer(conn->get());
  if (!peer.ok()) {
    return base::Annotate(peer.status(),
                          absl::StrCat("the workload at ", socket_path));
  }
  absl::StatusOr<handoff::ReceivedOffer> p =
      handoff::ReceiveOffer(conn->get(), proto::OfferKind::kExport,
                            std::max(deadline - absl::Now(), absl::Seconds(1)));
  if (!p.ok()) {
    return absl::Status(
        p.status().code(),
        absl::StrCat("no memory offer from ", socket_path, ": ",
                     p.status().message(),
                     absl::IsDeadlineExceeded(p.status())
                         ? " (is another migration process attached, or is "
                           "it not a workload's export?)"
                         : ""));
  }
  // The pagemap must be the workload's own (its writes, not another
  // process's); that its memory is registered for write tracking, the
  // probe below shows (PAGEMAP_SCAN with PM_SCAN_CHECK_WPASYNC).
  RAMFERRY_RETURN_IF_ERROR(CheckPagemap(p->fds[0].get(), peer->pid));
  RAMFERRY_ASSIGN_OR_RETURN(MappedOffer mapped, MapOffer(*p));
  auto attached = std::make_unique<AttachedMemoryImpl>(
      *std::move(conn), *std::move(peer), p->offer.flags, std::move(p->fds[0]),
      std::move(mapped.maps), std::move(mapped.files),
      std::move(mapped.regions), std::move(mapped.remote_bases));
  RAMFERRY_RETURN_IF_ERROR(ProbeTracking(*attached));
  return attached;
}

}  // namespace ramferry
