// MemoryExport (ramferry/memory_handoff.h): the workload's side.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/errno_status.h"
#include "base/named_enum.h"
#include "base/owned_fd.h"
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

class MemoryExportImpl final : public MemoryExport {
 public:
  MemoryExportImpl(std::string path, std::vector<uint8_t> offer,
                   std::vector<OwnedFd> fds, std::vector<OwnedFd> writable,
                   OwnedFd uffd, handoff::SeqpacketListener listener,
                   OwnedFd wake, EventHandler on_event)
      : path_(std::move(path)),
        offer_(std::move(offer)),
        fds_(std::move(fds)),
        writable_(std::move(writable)),
        uffd_(std::move(uffd)),
        listener_(std::move(listener)),
        wake_(std::move(wake)),
        on_event_(std::move(on_event)) {
    thread_ = std::thread([this] { Serve(); });
  }

  ~MemoryExportImpl() override {
    if (std::this_thread::get_id() == thread_.get_id()) {
      // join() would throw out of a destructor: say why, then stop.
      std::fputs(
          "ramferry: a MemoryExport was destroyed from its own event "
          "handler; destroy it from another thread (ramferry_export_free "
          "does)\n",
          stderr);
      std::abort();
    }
    const uint64_t one = 1;
    (void)!write(wake_.get(), &one, sizeof one);
    thread_.join();
    // uffd_ closes here, which unregisters the regions: an attacher's
    // scans fail from then on.
  }

  absl::Status WaitMigrated(absl::Duration timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    const auto done = [this] { return migrated_; };
    if (timeout == absl::InfiniteDuration()) {
      cv_.wait(lock, done);
    } else if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), done)) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "not migrated within %s", absl::FormatDuration(timeout)));
    }
    return absl::OkStatus();
  }

  int64_t paused_at_ns() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return paused_at_ns_;
  }
  const std::string& socket_path() const override { return path_; }

 private:
  // Readable `fd`, or false once woken for destruction.
  bool WaitReadable(int fd) {
    pollfd p[2] = {{fd, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    while (poll(p, 2, -1) < 0) {
      if (errno != EINTR) return false;  // cannot wait: serve no more
    }
    return (p[1].revents & POLLIN) == 0;
  }

  // One migration process after another, until migrated or destroyed.
  void Serve() {
    while (WaitReadable(listener_.get())) {
      absl::StatusOr<OwnedFd> conn = handoff::AcceptSeqpacket(
          listener_.get(), absl::ZeroDuration(), nullptr);
      if (!conn.ok()) continue;  // gone before accepted, or not this user's
      std::vector<int> fds;
      for (const OwnedFd& f : fds_) fds.push_back(f.get());
      if (!handoff::SendPacket(conn->get(), offer_, fds).ok()) continue;
      if (ServeAttacher(conn->get())) return;
    }
  }

  // Commands from one attacher; true once nothing more is to be served
  // (migrated, or the export is being destroyed).
  bool ServeAttacher(int conn) {
    for (;;) {
      if (!WaitReadable(conn)) return true;
      absl::StatusOr<CommandMessage> c =
          handoff::ReceiveCommand(conn, absl::ZeroDuration());
      if (!c.ok()) {
        Detached();
        return false;
      }
      switch (c->type) {
        case HandoffCommand::kPause:
          Reply(conn, HandoffCommand::kPaused, Pause());
          break;
        case HandoffCommand::kResume:
          Resume();
          Reply(conn, HandoffCommand::kResumed, 0);
          break;
        case HandoffCommand::kHandOverRequest:
          Grant(conn);
          break;
        case HandoffCommand::kMigrated:
          Event(ExportEvent::kMigrated);
          {
            std::lock_guard<std::mutex> lock(mu_);
            migrated_ = true;
          }
          cv_.notify_all();
          return true;
        default:  // not an attacher's command
          Detached();
          return false;
      }
    }
  }

  void Reply(int conn, HandoffCommand type, uint64_t value) {
    // A failed reply shows at the next read as a closed connection.
    (void)handoff::SendCommand(conn, type, value);
  }

  // The regions' files read-write, only with consent (the reopenings
  // Listen made then) and only while paused: the attacher passes them to
  // a process that runs on them, and a running workload would race it.
  void Grant(int conn) {
    proto::RefusalReason why = proto::RefusalReason::kNotAllowed;
    if (!writable_.empty()) {
      if (!paused_) {
        why = proto::RefusalReason::kNotPaused;
      } else {
        std::vector<int> fds;
        for (const OwnedFd& f : writable_) fds.push_back(f.get());
        const std::vector<uint8_t> grant = proto::EncodeCommand(
            {HandoffCommand::kHandOverGrant, writable_.size()});
        // A failed send shows at the next read as a closed connection.
        (void)handoff::SendPacket(conn, grant, fds);
        return;
      }
    }
    Reply(conn, HandoffCommand::kRefused, static_cast<uint64_t>(why));
  }

  // Pauses once (a repeated PAUSE, e.g. from a second attacher after the
  // first vanished, is answered with the first pause's time).
  uint64_t Pause() {
    if (!paused_) {
      Event(ExportEvent::kPause);
      paused_ = true;
      std::lock_guard<std::mutex> lock(mu_);
      paused_at_ns_ = static_cast<int64_t>(base::MonotonicNs());
    }
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<uint64_t>(paused_at_ns_);
  }

  void Resume() {
    if (!paused_) return;
    Event(ExportEvent::kResume);
    paused_ = false;
  }

  void Detached() {
    if (paused_) Event(ExportEvent::kDetachedWhilePaused);
  }

  void Event(ExportEvent e) {
    if (on_event_) on_event_(e);
  }

  const std::string path_;
  const std::vector<uint8_t> offer_;
  const std::vector<OwnedFd> fds_;  // what an offer carries: pagemap, regions'
  // With consent to hand over: the regions' files, read-write; else none.
  const std::vector<OwnedFd> writable_;
  const OwnedFd uffd_;  // the write tracking; never sent
  const handoff::SeqpacketListener listener_;
  const OwnedFd wake_;
  const EventHandler on_event_;
  bool paused_ = false;  // the serving thread's
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t paused_at_ns_ = 0;  // guarded by mu_
  bool migrated_ = false;     // guarded by mu_
  std::thread thread_;
};

}  // namespace

absl::string_view ExportEventName(ExportEvent event) {
  static constexpr base::EnumName<ExportEvent> kNames[] = {
      {ExportEvent::kPause, "pause"},
      {ExportEvent::kResume, "resume"},
      {ExportEvent::kMigrated, "migrated"},
      {ExportEvent::kDetachedWhilePaused, "detached-while-paused"},
  };
  return base::NameOf(kNames, event);
}

namespace {

// With consent to hand over: each region's file reopened read-write now,
// while the caller's descriptors are sure to be open (they are only
// borrowed), so a grant sends the very files the offer described.
absl::StatusOr<std::vector<OwnedFd>> WritableReopenings(
    absl::Span<const SharedRegion> regions) {
  std::vector<OwnedFd> out;
  for (const SharedRegion& r : regions) {
    OwnedFd fd(
        open(absl::StrCat("/proc/self/fd/", r.fd).c_str(), O_RDWR | O_CLOEXEC));
    if (!fd.valid()) {
      return base::Annotate(
          base::ErrnoStatus(errno, absl::StrCat("reopening fd ", r.fd,
                                                " read-write through /proc")),
          absl::StrCat("region ", r.id,
                       " (allowing hand-over needs a writable file; export "
                       "without it, or pass an fd opened read-write)"));
    }
    out.push_back(std::move(fd));
  }
  return out;
}

// A region as an export offers it: a read-only reopening of its
// descriptor, checked as the attacher will check it, its range armed for
// write protection on `uffd`.
absl::StatusOr<OwnedFd> ExportRegion(const SharedRegion& r, int uffd) {
  if (fcntl(r.fd, F_GETFD) < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "region %d: fd %d is not an open descriptor", r.id, r.fd));
  }
  OwnedFd dup(
      open(absl::StrCat("/proc/self/fd/", r.fd).c_str(), O_RDONLY | O_CLOEXEC));
  if (!dup.valid()) {
    return base::Annotate(
        base::ErrnoStatus(errno, absl::StrCat("reopening fd ", r.fd,
                                              " read-only through /proc")),
        absl::StrCat("region ", r.id));
  }
  // The same checks the attacher makes, so a bad region fails here.
  absl::StatusOr<handoff::SharedMapping> probe = handoff::SharedMapping::Map(
      dup.get(), r.fd_offset, r.length, /*writable=*/false);
  if (!probe.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("region ", r.id, ": ", probe.status().message()));
  }
  if (absl::Status s = handoff::ArmWriteProtect(uffd, r.base, r.length);
      !s.ok()) {
    return base::Annotate(s, absl::StrCat("region ", r.id));
  }
  return dup;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MemoryExport>> MemoryExport::Listen(
    const std::string& socket_path, absl::Span<const SharedRegion> regions,
    EventHandler on_event) {
  return Listen(socket_path, regions, std::move(on_event), ExportOptions{});
}

absl::StatusOr<std::unique_ptr<MemoryExport>> MemoryExport::Listen(
    const std::string& socket_path, absl::Span<const SharedRegion> regions,
    EventHandler on_event, const ExportOptions& options) {
  // Consent needs a handler: a hand-over asks for the files while the
  // writers are paused, which the export's thread must be running to
  // answer (SIGSTOP would stop it too).
  if (options.allow_hand_over && !on_event) {
    return absl::InvalidArgumentError(
        "allowing hand-over needs a pause handler: the export's thread "
        "answers the hand-over while the writers are paused, and a "
        "workload without a handler is paused with SIGSTOP, which stops "
        "that thread too");
  }
  absl::StatusOr<std::vector<uint8_t>> encoded = handoff::EncodeOfferOf(
      proto::OfferKind::kExport,
      (on_event ? proto::kOfferPausesItself : 0) |
          (options.allow_hand_over ? proto::kOfferAllowsHandOver : 0),
      regions);
  if (!encoded.ok()) return encoded.status();
  // The descriptors travel as read-only reopenings of the caller's: the
  // attacher only reads, and the caller keeps its own.
  std::vector<OwnedFd> fds;
  RAMFERRY_ASSIGN_OR_RETURN(OwnedFd pagemap, handoff::OpenOwnPagemap());
  absl::StatusOr<OwnedFd> uffd = handoff::OpenWriteProtectFd();
  if (!uffd.ok()) return uffd.status();
  for (const SharedRegion& r : regions) {
    RAMFERRY_ASSIGN_OR_RETURN(OwnedFd dup, ExportRegion(r, uffd->get()));
    fds.push_back(std::move(dup));
  }
  std::vector<OwnedFd> writable;
  if (options.allow_hand_over) {
    absl::StatusOr<std::vector<OwnedFd>> w = WritableReopenings(regions);
    if (!w.ok()) return w.status();
    writable = *std::move(w);
  }
  fds.insert(fds.begin(), std::move(pagemap));
  absl::StatusOr<handoff::SeqpacketListener> listener =
      handoff::ListenSeqpacket(socket_path);
  if (!listener.ok()) return listener.status();
  OwnedFd wake(eventfd(0, EFD_CLOEXEC));
  if (!wake.valid()) return base::ErrnoStatus(errno, "eventfd");
  return std::make_unique<MemoryExportImpl>(
      socket_path, *std::move(encoded), std::move(fds), std::move(writable),
      *std::move(uffd), *std::move(listener), std::move(wake),
      std::move(on_event));
}

}  // namespace ramferry
