// The destination's post-copy: from the source's MISSING_PAGES to the last
// page placed. One object per session that negotiated kFeaturePostcopy.
//
// The switch (control thread): a UffdPlacer per region (engine/
// uffd_placer.h) drops the missing ranges as each message arrives; once
// the set is complete every placer registers, the fault readers start,
// POSTCOPY_ARMED goes to the source and the caller is told it may resume
// its workload.
//
// After it, pages arrive two ways, and each is placed exactly once (the
// first copy wins, UFFDIO_COPY refuses the second):
//  - answers to requests: a fault reader per region batches the faults
//    (UffdPlacer::ReadFaults) into PAGE_REQUESTs on the urgent connection
//    (or the control connection when the session has none), and the urgent
//    thread places each PAGE_DATA;
//  - the source's push: the receive threads call Place / PlaceZero instead
//    of writing into the region.
// Once no page is awaited, the completer thread stops the readers,
// unregisters every region and sends POSTCOPY_COMPLETE: only then may the
// source drop its copy.
//
// Invariants: every page the source said is missing is written only
// through a placer (never by a plain write, which would fault on itself);
// its arrival digest (DigestTable) is recorded by the one placement that
// wrote it, before the page counts as placed, so a Verify after
// POSTCOPY_COMPLETE sees every digest. On failure (Stop) nothing is
// released: faulting threads stay blocked until ReleaseAll or the object
// is destroyed (which closes the userfaultfds, and the kernel then hands
// them zero pages): destroy it only with the workload stopped.
#ifndef RAMFERRY_ENGINE_POSTCOPY_POSTCOPY_TARGET_H_
#define RAMFERRY_ENGINE_POSTCOPY_POSTCOPY_TARGET_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/control.h"
#include "engine/failure.h"
#include "engine/page_placer.h"
#include "engine/pages/landings.h"
#include "engine/postcopy/uffd_placer.h"
#include "engine/region_table.h"
#include "engine/verify.h"
#include "proto/postcopy.h"
#include "ramferry/stats.h"

namespace ramferry::engine {

class PostcopyTarget final : public PagePlacer {
 public:
  // `control` carries POSTCOPY_ARMED and POSTCOPY_COMPLETE, and the
  // requests when `urgent` is null. `arrival_digests` may be null. Every
  // pointer must outlive this object.
  PostcopyTarget(const RegionTable& table, DigestTable* arrival_digests,
                 ControlChannel* control,
                 std::unique_ptr<ControlChannel> urgent,
                 SessionFailure* failure);
  ~PostcopyTarget() override;
  PostcopyTarget(const PostcopyTarget&) = delete;
  PostcopyTarget& operator=(const PostcopyTarget&) = delete;

  // Called once armed, on the control thread (Receiver::OnPostcopyArmed).
  void SetOnArmed(std::function<void()> on_armed) {
    on_armed_ = std::move(on_armed);
  }
  // Asked on the control thread right before POSTCOPY_ARMED goes (the
  // destination's commit point): an error refuses to arm, and the switch
  // fails with it.
  void SetArmGate(std::function<absl::Status()> gate) {
    arm_gate_ = std::move(gate);
  }

  // Control thread: one MISSING_PAGES payload, checked against the table
  // and applied; the last one arms.
  absl::Status OnMissingPages(absl::Span<const uint8_t> payload);

  // Receive threads, before and after they land a pre-copy packet with
  // plain writes (the switch not armed yet). Once the switch has begun
  // the regions are registered and pages dropped, and a plain write to a
  // dropped page would wait in the kernel for a fault reader, holding the
  // thread and its connection: BeginLanding then refuses the packet, and
  // the switch refuses to begin while a landing is under way. A source
  // switches only between rounds, after every packet of them landed.
  absl::Status BeginLanding() override;
  void EndLanding() override;

  // Whether the switch happened: from here on the regions' missing pages
  // are written only through Place / PlaceZero. Acquire: a thread that
  // sees true sees the placers.
  bool armed() const override { return armed_.load(std::memory_order_acquire); }
  // Every missing page is placed and the regions are plain memory again.
  bool complete() const { return complete_.load(std::memory_order_acquire); }

  // Receive threads (and the urgent thread): `pages` pages at `first_page`
  // of the region at table index `index`, from `src` (outside the
  // region), or zero pages. Only awaited pages are written.
  absl::Status Place(size_t index, uint64_t first_page, const uint8_t* src,
                     uint64_t pages) override;
  absl::Status PlaceZero(size_t index, uint64_t first_page,
                         uint64_t pages) override;

  // The hypervisor's hooks (Receiver): see ramferry/receiver.h.
  bool IsResident(uint32_t region_id, uint64_t first_page,
                  uint64_t pages) const;
  absl::Status WaitResident(uint32_t region_id, uint64_t first_page,
                            uint64_t pages, absl::Time deadline);
  absl::Status RequestPages(uint32_t region_id, uint64_t first_page,
                            uint64_t pages);
  absl::StatusOr<uint64_t> ReleaseAll();

  // FINISH arrived: OK only if the switch never happened or completed.
  absl::Status CheckFinished() const;

  // The session ended (any way): the readers, the urgent thread and the
  // completer stop and are joined; nothing is released. Idempotent; not
  // from one of this object's threads.
  void Stop();

  // Resuming after a lost connection (SessionOptions::
  // postcopy_resume_timeout). Detach: the connections are gone; the
  // threads stop, the placers stay registered (faulting threads stay
  // blocked, WaitResident waits on). Reattach: a new session's control and
  // urgent connections; tells the source what is still awaited (as
  // MISSING_PAGES, destination -> source), answers POSTCOPY_ARMED, restarts
  // the threads and asks again for every fault still unanswered.
  void Detach();
  absl::Status Reattach(ControlChannel* control,
                        std::unique_ptr<ControlChannel> urgent);
  // Armed, not complete, not stopped for good: what a resume picks up.
  bool resumable() const {
    return armed() && !complete() && !ended_.load(std::memory_order_acquire);
  }
  uint64_t resumes() const { return resumes_.load(std::memory_order_relaxed); }

  PostcopyStats stats() const;

 private:
  absl::Status Arm();
  void StartThreads();
  // Stops and joins the threads (StopThreads) and lets them start again.
  void StopThreads();
  absl::Status SendRequests(uint32_t region_id,
                            const std::vector<uint64_t>& pages);
  // Per region: faults -> PAGE_REQUESTs, until Stop or completion.
  void FaultLoop(size_t index);
  absl::Status SendRequest(const proto::PageRequest& request);
  // Sends `frame` on the urgent connection (`urgent` and there is one) or
  // the control connection, under conn_mu_, so that Detach and Reattach
  // never swap a connection out from under a send. UNAVAILABLE while
  // detached.
  absl::Status SendFrame(bool urgent, absl::Span<const uint8_t> frame);
  // PAGE_DATA from the urgent connection, until it closes or Stop.
  void UrgentLoop();
  absl::Status OnPageData(absl::Span<const uint8_t> payload);
  // Waits for the last page, then ends post-copy (see the file comment).
  void CompleterLoop();
  // `placed` pages left the awaited set; wakes the completer at zero.
  void CountPlaced(uint64_t placed);
  void Fail(const absl::Status& status);

  const RegionTable& table_;
  // Records the digests of what a placement placed (Landings::Placed).
  Landings page_landings_;
  // The session's connections: dropped by Detach and replaced by Reattach
  // under conn_mu_, with none of this object's threads running, but
  // RequestPages may be called from any thread at any time: every send
  // holds conn_mu_ (SendFrame). The urgent thread reads urgent_ without
  // it: it runs only between StartThreads and StopThreads.
  std::mutex conn_mu_;
  ControlChannel* control_;
  std::unique_ptr<ControlChannel> urgent_;
  // The session had an urgent connection (for the stats: urgent_ goes at
  // Detach, which every session's end calls).
  std::atomic<bool> had_urgent_;
  // Pages RequestPages was asked for while detached: asked for again by
  // Reattach. Guarded by conn_mu_.
  std::vector<std::pair<uint32_t, std::vector<uint64_t>>> deferred_;
  SessionFailure* const failure_;
  std::function<void()> on_armed_;
  std::function<absl::Status()> arm_gate_;

  // Control thread until armed_, read-only after.
  std::vector<std::unique_ptr<UffdPlacer>> placers_;
  std::optional<proto::MissingPagesChecker> checker_;
  absl::Time switch_start_;
  uint64_t armed_ns_ = 0;  // steady clock
  uint64_t switch_ns_ = 0;
  uint64_t missing_pages_ = 0;

  // BeginLanding/EndLanding against the switch: each side publishes its
  // own, then reads the other's (sequentially consistent), so one of the
  // two sees the other.
  std::atomic<bool> switching_{false};
  std::atomic<uint64_t> landings_{0};
  std::atomic<bool> armed_{false};
  std::atomic<bool> complete_{false};
  std::atomic<bool> stopping_{false};  // the threads are to stop
  std::atomic<bool> ended_{false};     // Stop: for good
  std::atomic<uint64_t> resumes_{0};
  // Missing pages not placed yet.
  std::atomic<uint64_t> remaining_{0};
  std::atomic<uint64_t> duration_ns_{0};
  std::atomic<uint64_t> requested_pages_{0};
  std::atomic<uint64_t> urgent_pages_{0};

  std::mutex mu_;
  // remaining_ reached 0, stopping_, or a reader returned.
  std::condition_variable cv_;
  size_t readers_live_ = 0;  // guarded by mu_

  std::vector<std::thread> fault_threads_;
  std::thread urgent_thread_;
  std::thread completer_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_POSTCOPY_POSTCOPY_TARGET_H_
