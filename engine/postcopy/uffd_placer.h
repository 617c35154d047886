// The destination's end of post-copy for one region: a userfaultfd in
// MISSING mode over the region, through which every page the source still
// owes is placed exactly once, and faults on those pages become requests.
//
// Life of a placer (one per region):
//   Create     checks the region (4 KiB pages, private anonymous memory)
//              and opens the userfaultfd (UFFDIO_API).
//   Register   UFFDIO_REGISTER in MISSING mode, before any page is
//              dropped: from then on nothing can make a dropped page
//              present but a placement (a touch faults and waits;
//              khugepaged leaves registered memory alone).
//   DropPages  for each range of the missing set (proto/postcopy.h), as it
//              arrives: marks the pages awaited, then MADV_DONTNEED, so
//              they fault once the workload runs. The stale bytes are gone.
//              Then the workload resumes.
//   ReadFaults (one reader thread) the pages threads block on, batched and
//              de-duplicated: the caller sends them as urgent requests.
//   Place      (any threads: urgent and bulk channels) the source's bytes,
//   PlaceZero  by UFFDIO_COPY / UFFDIO_ZEROPAGE, which never overwrite a
//              present page: the first copy of a page wins, a later one is
//              dropped and counted; the faulting threads wake as their
//              pages land.
//   Finish     once nothing is awaited: unregisters; the region is plain
//              memory again.
//
// Invariants:
//  - A page is "awaited" from DropPages until it is present: a placement
//    of it succeeded, or found it present already (EEXIST: another copy
//    won the race, the only way it can be present, since it was dropped
//    registered); awaited pages are exactly the ones the source must
//    still supply. Place and PlaceZero write only awaited pages (a page
//    not awaited is counted as dropped without a system call), and the
//    kernel refuses to overwrite a present one, so a copy arriving after
//    the page was placed, or after the workload wrote it, never lands.
//  - A fault on a page that is not awaited (memory never touched here,
//    which reads as zero, or a placed page the workload itself discarded
//    since with MADV_DONTNEED) is resolved by the reader at once with a
//    zero page: it is never sent to the source.
//  - IsResident / WaitResident answer "nothing in this range is awaited":
//    the range holds its final bytes or will fill without the network.
//  - Faulting threads stay blocked until their page is placed. Nothing
//    here wakes a thread without placing its page (UFFDIO_WAKE would only
//    make it fault again). A lost connection therefore leaves the workload
//    paused, not corrupted: reconnect, re-request PendingFaults(), go on.
//    Shutdown() wakes the reader and the waiters, never the faulting
//    threads. To give the destination up (its workload to be discarded),
//    ReleaseAll() fills every awaited page with zeros: every thread runs
//    on, on memory that is no longer the source's. Destroying a placer
//    with pages still awaited does not: it keeps its userfaultfd open
//    (closing it would let the kernel hand the blocked threads fresh zero
//    pages, unasked), so they stay blocked for the process's life. Destroy
//    a placer after the reader thread has returned (Shutdown() makes it
//    return).
//  - The region must not be unmapped, remapped or madvise()d by the
//    workload while registered: without UFFD_FEATURE_EVENT_REMOVE/UNMAP
//    (not asked for) the placer is not told, a page the workload discarded
//    while awaited would still get the source's bytes, and a placement into
//    a changed layout fails (ENOENT).
//  - While registered, nothing else may write awaited pages (no readv into
//    them: that would fault and wait on itself); everything goes through
//    Place.
//
// Fault latency runs from the moment the reader takes a fault message to
// the placement of its page (the kernel gives no fault timestamp; a reader
// kept blocked in ReadFaults takes messages as they come).
//
// Integration (not wired yet):
//  - Receiver, at the switch: a placer per region, registered; DropPages
//    for each decoded MISSING_PAGES message (proto/postcopy.h, checked by
//    one MissingPagesChecker); once the checker is complete(), report
//    "resumed" to the source.
//  - An urgent-channel thread loops ReadFaults(max, short timeout) and
//    sends each batch as page requests; after a reconnection it sends
//    PendingFaults() again. Shutdown() ends the loop.
//  - Receive threads read each payload into a staging buffer outside the
//    region (as the sealed receive path does already) and call Place /
//    PlaceZero per run of the packet (page_runs.h) instead of a readv
//    into the region: UFFDIO_COPY copies once more, the price of placing
//    atomically. PlaceResult::dropped counts the copies that lost.
//  - The end: once awaited_pages() is 0 on every region, Finish(), then
//    confirm to the source, which may then drop its copy. On an abandoned
//    migration: Shutdown(), keep the workload paused, and ReleaseAll()
//    only if it is to be discarded.
//  - Stats: stats() per region, latency snapshots merged across regions
//    (FaultLatencySnapshot::Merge) into the session's report.
//  - Hypervisor API: "is this range resident" is IsResident, "tell me when"
//    WaitResident; a caller with its own fault handling runs the
//    ReadFaults loop itself and asks for the pages urgently through the
//    session.
#ifndef RAMFERRY_ENGINE_POSTCOPY_UFFD_PLACER_H_
#define RAMFERRY_ENGINE_POSTCOPY_UFFD_PLACER_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/page_size.h"
#include "engine/pages/atomic_page_set.h"
#include "engine/postcopy/fault_latency.h"
#include "proto/postcopy.h"
#include "ramferry/region.h"

namespace ramferry::engine {

using proto::PageRange;

// What one placement did, in pages; placed + dropped = pages asked for.
struct PlaceResult {
  uint64_t placed = 0;
  // Present already (placed by an earlier copy, or never awaited): left
  // exactly as they were.
  uint64_t dropped = 0;
};

struct UffdPlacerStats {
  uint64_t awaited_pages = 0;   // now
  uint64_t dropped_pages = 0;   // marked awaited by DropPages (with repeats)
  uint64_t fault_messages = 0;  // read from the userfaultfd, repeats too
  uint64_t faulted_pages = 0;   // returned by ReadFaults (distinct requests)
  // Faults on pages not awaited, zero-filled here (never requested).
  uint64_t local_zero_faults = 0;
  uint64_t placed_pages = 0;       // by Place
  uint64_t zero_placed_pages = 0;  // by PlaceZero
  uint64_t duplicate_pages = 0;    // dropped by Place and PlaceZero
  uint64_t released_pages = 0;     // zero-filled by ReleaseAll
  uint64_t eagain_retries = 0;     // UFFDIO_COPY/ZEROPAGE that did nothing
  FaultLatencySnapshot latency;
};

class UffdPlacer {
 public:
  // Fails with a reason that says what to change: a page size other than
  // 4 KiB (huge pages are not supported yet), memory that is not private
  // anonymous (a shared file needs MINOR mode and UFFDIO_CONTINUE, not
  // supported yet), or a userfaultfd that cannot be had.
  static absl::StatusOr<std::unique_ptr<UffdPlacer>> Create(
      const Region& region);
  ~UffdPlacer();
  UffdPlacer(const UffdPlacer&) = delete;
  UffdPlacer& operator=(const UffdPlacer&) = delete;

  const Region& region() const { return region_; }

  // Registers the region in MISSING mode. Once, before DropPages.
  absl::Status Register();

  // Marks `ranges` awaited and discards their bytes (MADV_DONTNEED). Only
  // after Register() (so nothing but a placement can fill them again),
  // with the workload paused. Ranges may come in any order and over
  // several calls; each must lie inside the region.
  absl::Status DropPages(absl::Span<const PageRange> ranges);

  // Places `pages` pages from `src` (pages * 4 KiB readable bytes, outside
  // the region) at `first_page`, the awaited ones only. Any thread. A run
  // may come back partly placed: see the result.
  absl::StatusOr<PlaceResult> Place(uint64_t first_page, const void* src,
                                    uint64_t pages);
  // The same with zero pages (UFFDIO_ZEROPAGE: no bytes to send or copy).
  absl::StatusOr<PlaceResult> PlaceZero(uint64_t first_page, uint64_t pages);
  // Both, telling `on_placed(first, end)` of each stretch of pages this
  // call wrote, before those pages stop being awaited (so a record kept
  // per page, such as its digest, is written by exactly one placement and
  // is in place before anyone learns the page is resident).
  using OnPlaced = absl::FunctionRef<void(uint64_t first, uint64_t end)>;
  absl::StatusOr<PlaceResult> Place(uint64_t first_page, const void* src,
                                    uint64_t pages, OnPlaced on_placed);
  absl::StatusOr<PlaceResult> PlaceZero(uint64_t first_page, uint64_t pages,
                                        OnPlaced on_placed);

  // Waits up to `timeout` for faults and returns the awaited pages that
  // threads block on and that were not returned before (ascending, each
  // once), at most `max_messages` (1 to 4096) fault messages' worth. Every
  // fault pending when it reads comes back in this one batch. Faults on pages
  // not awaited are resolved here and not returned. Empty on timeout;
  // Cancelled after Shutdown(). One reader thread at a time. On another
  // error the rest of the batch was still taken in: its requests are in
  // PendingFaults().
  absl::StatusOr<std::vector<uint64_t>> ReadFaults(size_t max_messages,
                                                   absl::Duration timeout);

  // The pages returned by ReadFaults and not placed yet: the requests to
  // send again after a reconnection.
  std::vector<uint64_t> PendingFaults() const;
  // The awaited pages as canonical ranges (proto/postcopy.h), from
  // `from_page` on, at most `max_ranges` of them; `*next` is where the
  // next call resumes (the region's page count once done). What a
  // reconnected source must still send.
  std::vector<PageRange> AwaitedRanges(uint64_t from_page, size_t max_ranges,
                                       uint64_t* next) const;

  // Whether no page of [first_page, first_page + pages) is awaited. False
  // for a range outside the region. Any thread, lock-free.
  bool IsResident(uint64_t first_page, uint64_t pages) const;
  // Blocks until IsResident(first_page, pages), `deadline`
  // (DeadlineExceeded) or Shutdown() (Cancelled). InvalidArgument for a
  // range outside the region.
  absl::Status WaitResident(uint64_t first_page, uint64_t pages,
                            absl::Time deadline);

  // Wakes a blocked ReadFaults and every WaitResident, now and later, and
  // touches no faulting thread. Place and ReleaseAll still work after it.
  // Idempotent, any thread.
  void Shutdown();

  // Gives the destination up: every awaited page becomes a zero page
  // (UFFDIO_ZEROPAGE), so every blocked thread runs on. The source's data
  // for those pages is lost here: only for a workload that will be
  // discarded. Returns how many pages were released.
  absl::StatusOr<uint64_t> ReleaseAll();

  // The normal end: with no page awaited, unregisters the region.
  // FailedPrecondition (naming the count) while pages are still awaited.
  absl::Status Finish();

  uint64_t awaited_pages() const { return awaited_.Count(); }
  UffdPlacerStats stats() const;

 private:
  enum class Fill { kCopy, kZero };

  UffdPlacer(const Region& region, int uffd, int wake_fd);

  absl::Status CheckRange(uint64_t first_page, uint64_t pages,
                          const char* what) const;
  absl::StatusOr<PlaceResult> PlaceRuns(uint64_t first_page, const uint8_t* src,
                                        uint64_t pages, Fill fill,
                                        OnPlaced on_placed);
  // Fills [first, end) (awaited when it was looked at) with one ioctl per
  // stretch of absent pages; pages found present count as dropped.
  absl::Status FillRun(uint64_t first, uint64_t end, const uint8_t* src,
                       Fill fill, PlaceResult& result, OnPlaced on_placed);
  // The ioctl itself: pages filled from `first`, or -errno (-EEXIST: the
  // page at `first` is present).
  int64_t FillIoctl(uint64_t first, uint64_t pages, const uint8_t* src,
                    Fill fill);
  // The error of a fill of [first, end) that failed with `err`, with what
  // to do about the errors a caller can cause.
  absl::Status FillError(Fill fill, uint64_t first, uint64_t end,
                         int err) const;
  // After [first, end) landed: no longer awaited; their pending faults'
  // latency recorded; waiters told.
  void Landed(uint64_t first, uint64_t end);
  void RecordLatency(absl::Span<const uint64_t> pages, int64_t now_ns);
  // A fault on a page not awaited: a zero page, here and now. False if
  // the page was present already (a stale fault message).
  absl::StatusOr<bool> ResolveLocally(uint64_t page);
  // ReadFaults' parts (uffd_faults.cc): whether the userfaultfd became
  // readable within `timeout` (false: it did not); one fault message at
  // `address`, read at `now`: resolved here, or added to `out` as a
  // request, or (pending already) dropped.
  absl::StatusOr<bool> AwaitFaults(absl::Duration timeout);
  // base::MonotonicNs, signed: fault times are subtracted in either order.
  static int64_t SteadyNowNs();
  absl::Status TakeFault(uint64_t address, int64_t now,
                         std::vector<uint64_t>* out);

  const Region region_;
  const uint64_t page_count_;
  const int uffd_;
  const int wake_fd_;  // an eventfd: Shutdown() makes it readable
  std::atomic<bool> registered_{false};
  std::atomic<bool> shutdown_{false};
  std::atomic<bool> reading_{false};

  AtomicPageSet awaited_;
  // Returned by ReadFaults and not yet placed. Only the reader sets bits;
  // any placing thread clears them.
  AtomicPageSet pending_;
  // std::mutex, not absl::Mutex, as across the engine (engine/failure.h):
  // TSan sees it synchronise.
  std::mutex arrival_mu_;
  // Steady-clock ns at which each pending fault was read. Written before
  // the page's pending bit is set, erased by whoever clears the bit.
  absl::flat_hash_map<uint64_t, int64_t> arrival_ns_;  // under arrival_mu_

  std::mutex wait_mu_;
  std::condition_variable resident_cv_;
  std::atomic<int> waiters_{0};

  FaultLatencyHistogram latency_;
  std::atomic<uint64_t> dropped_pages_{0};
  std::atomic<uint64_t> fault_messages_{0};
  std::atomic<uint64_t> faulted_pages_{0};
  std::atomic<uint64_t> local_zero_faults_{0};
  std::atomic<uint64_t> placed_pages_{0};
  std::atomic<uint64_t> zero_placed_pages_{0};
  std::atomic<uint64_t> duplicate_pages_{0};
  std::atomic<uint64_t> released_pages_{0};
  std::atomic<uint64_t> eagain_retries_{0};
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_POSTCOPY_UFFD_PLACER_H_
