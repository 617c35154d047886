// HandOverAttached (ramferry/memory_handoff.h): a local migration that
// copies nothing. The workload's own files go, read-write, from the
// workload through this process to the adopter; what this process adds is
// the order of things and the commit point: the adopter's ADOPTED.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/named_enum.h"
#include "base/owned_fd.h"
#include "base/status_util.h"
#include "handoff/handoff_io.h"
#include "handoff/unix_seqpacket.h"
#include "proto/memory_handoff.h"
#include "ramferry/memory_handoff.h"

namespace ramferry {
namespace {

// MADV_POPULATE_READ (Linux 5.14): Debian 12's headers may lack it.
constexpr int kMadvPopulateRead = 22;

int64_t Now() { return static_cast<int64_t>(base::MonotonicNs()); }

// After the pause: the writable files, the digests (verify), the offer and
// its acknowledgement. OK once the adopter acknowledged, and only then.
absl::Status GrantAndOffer(AttachedMemory& att, int adopter,
                           const std::string& adopt_socket,
                           const HandOverOptions& o, HandOverReport* r) {
  int64_t t = Now();
  absl::StatusOr<AttachedMemory::Writable> w =
      att.RequestWritable(std::max(o.pause_timeout, absl::Seconds(10)));
  r->grant_ns = Now() - t;
  if (!w.ok()) return w.status();
  std::vector<base::OwnedFd> owned;  // closed here whatever happens
  for (int fd : w->fds) owned.emplace_back(fd);
  std::vector<uint64_t> digests;
  if (o.verify) {
    // Over this process's read-only mapping of the same pages: the
    // memory as paused, which nobody may change from here on.
    t = Now();
    for (const Region& region : att.regions()) {
      digests.push_back(RegionDigest(region.base, region.length));
    }
    r->verify_ns = Now() - t;
  }
  t = Now();
  absl::Status s = handoff::OfferToAdopter(adopter, adopt_socket, w->regions,
                                           digests, o.adopt_timeout);
  r->hand_over_ns = Now() - t;
  return s;
}

// The workload is paused; `why` failed before the commit point.
void ResumeAfter(AttachedMemory& att, absl::Status why, HandOverReport* r) {
  r->status = std::move(why);
  if (absl::Status s = att.Resume(); !s.ok()) {
    r->outcome = HandOverReport::Outcome::kResumeFailed;
    r->status = absl::Status(
        r->status.code(),
        absl::StrCat(r->status.message(),
                     "; and resuming the workload failed too: ", s.message()));
    return;
  }
  r->outcome = HandOverReport::Outcome::kResumed;
}

}  // namespace

absl::string_view HandOverOutcomeName(HandOverReport::Outcome outcome) {
  static constexpr base::EnumName<HandOverReport::Outcome> kNames[] = {
      {HandOverReport::Outcome::kMigrated, "migrated"},
      {HandOverReport::Outcome::kResumed, "failed-resumed"},
      {HandOverReport::Outcome::kNotPaused, "failed-not-paused"},
      {HandOverReport::Outcome::kResumeFailed, "failed-resume-failed"},
  };
  return base::NameOf(kNames, outcome);
}

namespace {

// Attaches to the workload and checks, before any pause, that it consented
// to a hand-over; fills the report's figures of its memory.
absl::StatusOr<std::unique_ptr<AttachedMemory>> AttachForHandOver(
    const std::string& attach_socket, const HandOverOptions& o,
    HandOverReport& r) {
  absl::StatusOr<std::unique_ptr<AttachedMemory>> att =
      AttachedMemory::Attach(attach_socket, o.attach_timeout);
  if (!att.ok()) {
    return base::Annotate(att.status(),
                          absl::StrCat("the workload at ", attach_socket));
  }
  r.workload_pid = (*att)->pid();
  r.regions = (*att)->regions().size();
  for (const Region& region : (*att)->regions()) r.bytes += region.length;
  // Refused before any pause: a workload that did not consent (or an
  // older one, which would take the request for a broken connection and
  // stay paused) is never stopped for nothing.
  if (!(*att)->allows_hand_over()) {
    return absl::FailedPreconditionError(absl::StrCat(
        proto::RefusalReasonText(proto::RefusalReason::kNotAllowed),
        "; it was not paused and runs on"));
  }
  if (o.verify) {
    // The digest reads every page of this process's read-only mapping,
    // which the migration never touched: faulting it in now, while the
    // workload runs, keeps the faults out of the downtime (a page the
    // workload writes meanwhile stays mapped: same file). Best effort.
    for (const Region& region : (*att)->regions()) {
      (void)madvise(region.base, region.length, kMadvPopulateRead);
    }
  }
  return att;
}

// Pauses the workload by its handler; a workload stopped by signal
// instead cannot answer while paused, so it is refused.
absl::Status PauseForHandOver(AttachedMemory& att, const HandOverOptions& o,
                              HandOverReport& r) {
  r.paused_at_ns = Now();
  absl::Status s = att.Pause(o.pause_timeout);
  r.pause_ns = Now() - r.paused_at_ns;
  r.pause_method = att.stopped_by_signal() ? "SIGSTOP" : "handler";
  if (s.ok() && att.stopped_by_signal()) {
    s = absl::FailedPreconditionError(absl::StrCat(
        att.pause_note(),
        "; a hand-over needs the workload's handler to pause it (its export "
        "thread answers while paused): raise the pause timeout"));
  }
  return s;
}

}  // namespace

HandOverReport HandOverAttached(const std::string& attach_socket,
                                const std::string& adopt_socket,
                                const HandOverOptions& o) {
  HandOverReport r;
  absl::StatusOr<std::unique_ptr<AttachedMemory>> att =
      AttachForHandOver(attach_socket, o, r);
  if (!att.ok()) {
    r.status = att.status();
    return r;
  }
  // The adopter is reached before the pause, so an absent one costs no
  // downtime; it waits for the offer meanwhile.
  absl::StatusOr<base::OwnedFd> adopter =
      handoff::ConnectSeqpacket(adopt_socket, o.adopt_timeout);
  if (!adopter.ok()) {
    r.status = base::Annotate(
        adopter.status(),
        absl::StrCat("no adopter at ", adopt_socket,
                     " (the workload was not paused and runs on)"));
    return r;
  }
  absl::Status s = PauseForHandOver(**att, o, r);
  if (s.ok()) s = GrantAndOffer(**att, adopter->get(), adopt_socket, o, &r);
  if (!s.ok()) {
    ResumeAfter(**att, std::move(s), &r);
    return r;
  }
  r.downtime_ns = Now() - r.paused_at_ns;
  r.outcome = HandOverReport::Outcome::kMigrated;
  // Past the commit point: the adopter runs on the memory. A workload
  // that cannot be told stays paused (it sees the connection close while
  // paused), which is safe.
  if (absl::Status m = (*att)->Migrated(); !m.ok()) {
    r.status = base::Annotate(m,
                              "the memory was handed over, but telling the "
                              "workload MIGRATED failed; it stays paused");
  }
  return r;
}

}  // namespace ramferry
