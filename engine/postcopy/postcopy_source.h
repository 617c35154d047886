// The source half of post-copy, as PostcopyTarget is the destination's:
// the pages still to push, the requests that jump ahead of them, the
// urgent connection's thread that answers requests from this side's
// memory, and the counters. The session keeps what is the session's: the
// control connection, the rounds that carry the push, and the
// destination's POSTCOPY_ARMED / POSTCOPY_COMPLETE.
//
// Threads: the caller's (the switch, FillPushChunk, Pushed, Complete), the
// control thread (OnPageRequest, OnResumeMissing, may_arm), and the urgent
// thread this object runs from StartAnswering to Complete. The push set is
// shared by the caller's thread and the urgent thread through DirtyBitmap's
// atomic word operations; the requests and the latest request (the push's
// locality hint) are guarded by mu_.
#ifndef RAMFERRY_ENGINE_POSTCOPY_POSTCOPY_SOURCE_H_
#define RAMFERRY_ENGINE_POSTCOPY_POSTCOPY_SOURCE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/control.h"
#include "engine/postcopy/thread_priority.h"
#include "proto/postcopy.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/region.h"
#include "ramferry/stats.h"

namespace ramferry::engine {

class PostcopySource {
 public:
  // `regions` must outlive this object.
  explicit PostcopySource(absl::Span<const Region> regions)
      : regions_(regions) {}
  ~PostcopySource() { Stop(); }
  PostcopySource(const PostcopySource&) = delete;
  PostcopySource& operator=(const PostcopySource&) = delete;

  // ---- set-up ----
  // kFeaturePostcopyUrgent: the urgent connection, handshaken and sealed.
  void SetUrgent(std::unique_ptr<ControlChannel> urgent) {
    urgent_ = std::move(urgent);
  }
  // A session that resumes a cut one: its counters go on from `before`.
  void CarryOver(const PostcopyStats& before);
  // A resumed session's switch, before the control thread starts: nothing
  // to push until the destination's missing set arrives (OnResumeMissing).
  void BeginResume();

  // ---- the switch (caller thread) ----
  // `missing` (one bitmap a region, checked by the caller) becomes the
  // push set, and goes to the destination as MISSING_PAGES frames, a
  // message at a time through `send`, so no whole list is built.
  absl::Status BeginSwitch(
      absl::Span<DirtyBitmap* const> missing,
      absl::FunctionRef<absl::Status(const std::vector<uint8_t>&)> send);
  // Answering requests on the urgent connection, where there is one,
  // starts: before the destination arms at a switch (its first faults
  // need no wait for the source to see POSTCOPY_ARMED), after it at a
  // resume. `fail` gets what ends the urgent thread before Complete.
  void StartAnswering(std::function<void(const absl::Status&)> fail);
  // The destination armed: the switch's time and the push's start.
  void Armed();

  // Whether the switch began (BeginSwitch or BeginResume); any thread.
  bool started() const { return started_.load(); }

  // ---- the control thread ----
  // A PAGE_REQUEST where the session has no urgent connection: its pages
  // go first into the next push chunk.
  absl::Status OnPageRequest(absl::Span<const uint8_t> payload);
  // A resumed session: one MISSING_PAGES of the destination's remaining
  // set, checked.
  absl::Status OnResumeMissing(absl::Span<const uint8_t> payload);
  // Whether POSTCOPY_ARMED may come now: the switch began, and a resumed
  // session's missing set arrived whole.
  bool may_arm() const;

  // ---- the push (caller thread) ----
  // Moves up to `max_pages` pages still to push into `chunk` (one empty
  // bitmap a region), requested ones first, then from the push cursor
  // on; returns how many.
  uint64_t FillPushChunk(absl::Span<DirtyBitmap* const> chunk,
                         uint64_t max_pages);
  void Pushed(uint64_t pages) {
    pushed_.fetch_add(pages, std::memory_order_relaxed);
  }
  // The destination holds every page: requests are over; the urgent
  // thread is stopped and joined.
  void Complete();

  // Any thread, on the session's failure: unblocks the urgent thread.
  void Shutdown();
  // Ends the urgent thread, if it runs: its connection shut down, the
  // thread joined. Before whatever its `fail` uses goes.
  void Stop();

  // The counters; `started` is left to the caller, who knows it armed.
  PostcopyStats Stats() const;

 private:
  void UrgentLoop(const std::function<void(const absl::Status&)>& fail);
  absl::Status AnswerRequest(const proto::PageRequest& request,
                             RequestPathPriority& priority);
  // The push goes on near `request` (locality); any thread.
  void NoteRequest(const proto::PageRequest& request);
  // The index in regions_ of a region id the decoders checked.
  size_t RegionIndex(uint32_t region_id) const;
  // Region infos, push and requested sets, started_: the switch's state.
  void Begin(bool resume);

  const absl::Span<const Region> regions_;
  std::unique_ptr<ControlChannel> urgent_;
  std::thread urgent_thread_;
  // The region table as the decoders check against (set before started_,
  // read-only after).
  std::vector<proto::RegionInfo> region_infos_;
  std::atomic<bool> started_{false};
  // The pages still to push, one bitmap per region (the caller's thread
  // takes; the urgent thread takes requested ones too), and where the next
  // push chunk starts (caller's thread).
  std::vector<std::unique_ptr<DirtyBitmap>> push_;
  size_t push_region_ = 0;
  uint64_t push_word_ = 0;
  uint64_t seen_hint_seq_ = 0;  // the request the cursor last moved to
  // A resumed session's check of the destination's set (control thread);
  // engaged exactly in a resumed session.
  std::optional<proto::MissingPagesChecker> resume_checker_;
  absl::Time switch_start_;
  uint64_t armed_ns_ = 0;  // steady clock, caller's thread
  uint64_t resumes_ = 0;
  std::atomic<uint64_t> missing_{0}, requested_pages_{0}, urgent_pages_{0},
      pushed_{0}, switch_ns_{0}, duration_ns_{0};

  // Pages requested on the control connection and not pushed yet, a
  // bitmap a region, and the words of them that hold any, (region, word)
  // each once, oldest first (bounded by the regions' size, not by how
  // many requests came); the latest request (push locality), counted so a
  // new one is told from the one before.
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<DirtyBitmap>> requested_;
  std::deque<std::pair<size_t, size_t>> requested_words_;
  uint64_t hint_seq_ = 0;
  size_t hint_region_ = 0;
  uint64_t hint_page_ = 0;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_POSTCOPY_POSTCOPY_SOURCE_H_
