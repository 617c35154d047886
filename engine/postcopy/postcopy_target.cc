#include "engine/postcopy/postcopy_target.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "base/counters.h"
#include "base/page_size.h"
#include "base/status_macros.h"
#include "base/status_util.h"
#include "engine/postcopy/thread_priority.h"
#include "proto/control.h"

namespace ramferry::engine {
namespace {

// Faults read per batch: every fault pending when the reader looks comes
// back in one PAGE_REQUEST, up to this many messages.
constexpr size_t kFaultBatch = 256;
// How long a reader waits before it looks at stopping_ again.
constexpr absl::Duration kFaultPoll = absl::Milliseconds(100);

}  // namespace

PostcopyTarget::PostcopyTarget(const RegionTable& table,
                               DigestTable* arrival_digests,
                               ControlChannel* control,
                               std::unique_ptr<ControlChannel> urgent,
                               SessionFailure* failure)
    : table_(table),
      page_landings_(Landings::Tables{.digests = arrival_digests}),
      control_(control),
      urgent_(std::move(urgent)),
      had_urgent_(urgent_ != nullptr),
      failure_(failure) {}

PostcopyTarget::~PostcopyTarget() { Stop(); }

absl::Status PostcopyTarget::OnMissingPages(absl::Span<const uint8_t> payload) {
  if (armed()) {
    return absl::FailedPreconditionError(
        "MISSING_PAGES after the post-copy switch; the source sends one set");
  }
  const std::vector<proto::RegionInfo> regions = table_.Describe();
  if (!checker_.has_value()) {
    switching_.store(true);
    if (landings_.load() != 0) {
      return absl::FailedPreconditionError(
          "MISSING_PAGES while a channel was landing a pre-copy packet; the "
          "source switches only between rounds, once every packet landed");
    }
    switch_start_ = absl::Now();
    // Every region gets its placer before any page is dropped: a region
    // that cannot take post-copy (its memory, its page size) refuses the
    // switch while the destination is still whole.
    // Each is registered before any page is dropped (UffdPlacer).
    for (const Region& r : table_.regions()) {
      absl::StatusOr<std::unique_ptr<UffdPlacer>> p = UffdPlacer::Create(r);
      if (!p.ok()) return base::Annotate(p.status(), "post-copy switch");
      if (absl::Status s = (*p)->Register(); !s.ok()) {
        return base::Annotate(s, "post-copy switch");
      }
      placers_.push_back(std::move(*p));
    }
    checker_.emplace(regions);
  }
  RAMFERRY_ASSIGN_OR_RETURN(proto::MissingPages msg,
                            proto::DecodeMissingPages(payload, regions));
  RAMFERRY_RETURN_IF_ERROR(checker_->Accept(msg));
  const Region* region = table_.Find(msg.region_id);
  UffdPlacer& placer = *placers_[table_.IndexOf(*region)];
  if (absl::Status s = placer.DropPages(msg.ranges); !s.ok()) {
    return base::Annotate(
        s, absl::StrFormat("post-copy switch, region %d", msg.region_id));
  }
  if (!checker_->complete()) return absl::OkStatus();
  return Arm();
}

absl::Status PostcopyTarget::BeginLanding() {
  landings_.fetch_add(1);
  if (switching_.load()) {
    landings_.fetch_sub(1);
    return absl::InvalidArgumentError(
        "a pre-copy packet after the post-copy switch began (MISSING_PAGES); "
        "the source switches only between rounds");
  }
  return absl::OkStatus();
}

void PostcopyTarget::EndLanding() { landings_.fetch_sub(1); }

absl::Status PostcopyTarget::Arm() {
  if (arm_gate_) {
    RAMFERRY_RETURN_IF_ERROR(arm_gate_());
  }
  missing_pages_ = checker_->missing_pages();
  remaining_.store(missing_pages_, std::memory_order_relaxed);
  switch_ns_ = static_cast<uint64_t>(
      absl::ToInt64Nanoseconds(absl::Now() - switch_start_));
  armed_ns_ = base::MonotonicNs();
  armed_.store(true, std::memory_order_release);
  // ARMED before the threads start: the completer of a set with nothing
  // missing sends POSTCOPY_COMPLETE at once, which must not overtake it.
  // (A fault meanwhile waits in the userfaultfd for its reader.)
  RAMFERRY_RETURN_IF_ERROR(
      SendFrame(false, proto::StartFrame(proto::ControlType::kPostcopyArmed)));
  StartThreads();
  if (on_armed_) on_armed_();
  return absl::OkStatus();
}

void PostcopyTarget::StartThreads() {
  readers_live_ = placers_.size();
  for (size_t i = 0; i < placers_.size(); ++i) {
    fault_threads_.emplace_back([this, i] {
      FaultLoop(i);
      std::lock_guard<std::mutex> lock(mu_);
      --readers_live_;
      cv_.notify_all();
    });
  }
  if (urgent_ != nullptr) {
    urgent_thread_ = std::thread([this] { UrgentLoop(); });
  }
  completer_ = std::thread([this] { CompleterLoop(); });
}

void PostcopyTarget::StopThreads() {
  stopping_.store(true, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  if (urgent_ != nullptr) urgent_->Shutdown();
  // The readers look at stopping_ at least every kFaultPoll.
  for (auto& t : fault_threads_) {
    if (t.joinable()) t.join();
  }
  fault_threads_.clear();
  if (urgent_thread_.joinable()) urgent_thread_.join();
  if (completer_.joinable()) completer_.join();
  stopping_.store(false, std::memory_order_release);
}

void PostcopyTarget::Detach() {
  if (ended_.load(std::memory_order_acquire)) return;
  StopThreads();
  // The connections are about to be destroyed (the receiver's control, the
  // urgent one here): no send may reach them from now on.
  std::lock_guard<std::mutex> lock(conn_mu_);
  control_ = nullptr;
  urgent_.reset();
}

absl::Status PostcopyTarget::Reattach(ControlChannel* control,
                                      std::unique_ptr<ControlChannel> urgent) {
  std::vector<std::pair<uint32_t, std::vector<uint64_t>>> deferred;
  {
    std::lock_guard<std::mutex> lock(conn_mu_);
    control_ = control;
    urgent_ = std::move(urgent);
    had_urgent_.store(urgent_ != nullptr, std::memory_order_relaxed);
    deferred.swap(deferred_);
  }
  resumes_.fetch_add(1, std::memory_order_relaxed);
  for (const auto& p : placers_) {
    uint64_t from = 0;
    const uint64_t pages = p->region().page_count();
    do {
      proto::MissingPages m;
      m.region_id = p->region().id;
      uint64_t next = 0;
      m.ranges = p->AwaitedRanges(from, proto::kMaxMissingRanges, &next);
      from = next;
      m.last = from >= pages;
      RAMFERRY_RETURN_IF_ERROR(
          SendFrame(false, proto::EncodeMissingPagesFrame(m)));
    } while (from < pages);
  }
  RAMFERRY_RETURN_IF_ERROR(
      SendFrame(false, proto::StartFrame(proto::ControlType::kPostcopyArmed)));
  StartThreads();
  // What was asked for and never answered went with the old connection,
  // and what RequestPages was asked for while detached never left.
  for (const auto& p : placers_) {
    RAMFERRY_RETURN_IF_ERROR(SendRequests(p->region().id, p->PendingFaults()));
  }
  for (const auto& [region_id, pages] : deferred) {
    RAMFERRY_RETURN_IF_ERROR(SendRequests(region_id, pages));
  }
  return absl::OkStatus();
}

absl::Status PostcopyTarget::SendRequests(uint32_t region_id,
                                          const std::vector<uint64_t>& pages) {
  for (size_t at = 0; at < pages.size(); at += proto::kMaxPageRequestPages) {
    proto::PageRequest q;
    q.region_id = region_id;
    const size_t n =
        std::min<size_t>(proto::kMaxPageRequestPages, pages.size() - at);
    q.pages.assign(pages.begin() + at, pages.begin() + at + n);
    RAMFERRY_RETURN_IF_ERROR(SendRequest(q));
  }
  return absl::OkStatus();
}

void PostcopyTarget::FaultLoop(size_t index) {
  RequestPathPriority priority;
  UffdPlacer& placer = *placers_[index];
  const uint32_t region_id = placer.region().id;
  while (!stopping_.load(std::memory_order_acquire) && !complete()) {
    absl::StatusOr<std::vector<uint64_t>> faults =
        placer.ReadFaults(kFaultBatch, kFaultPoll);
    if (!faults.ok()) {
      if (!absl::IsCancelled(faults.status())) {
        Fail(base::Annotate(
            faults.status(),
            absl::StrFormat("post-copy faults, region %d", region_id)));
      }
      return;
    }
    if (faults->empty()) {
      priority.Idle();
      continue;
    }
    requested_pages_.fetch_add(faults->size(), std::memory_order_relaxed);
    if (absl::Status s = SendRequests(region_id, *faults); !s.ok()) {
      // The faults stay pending: a resumed session asks again.
      Fail(base::Annotate(s, "post-copy page request"));
      return;
    }
    // A batch short of full drained what was queued: the next read waits.
    if (faults->size() < kFaultBatch) {
      priority.Idle();
    } else {
      priority.Worked();
    }
  }
}

absl::Status PostcopyTarget::SendRequest(const proto::PageRequest& request) {
  return SendFrame(true, proto::EncodePageRequest(request));
}

absl::Status PostcopyTarget::SendFrame(bool urgent,
                                       absl::Span<const uint8_t> frame) {
  std::lock_guard<std::mutex> lock(conn_mu_);
  ControlChannel* via = urgent && urgent_ != nullptr ? urgent_.get() : control_;
  if (via == nullptr) {
    return absl::UnavailableError(
        "post-copy is detached: its connection was lost and no session has "
        "resumed it yet");
  }
  return via->Send(frame);
}

void PostcopyTarget::UrgentLoop() {
  RequestPathPriority priority;
  while (!stopping_.load(std::memory_order_acquire)) {
    if (urgent_->Readable()) {
      priority.Worked();
    } else {
      priority.Idle();
    }
    absl::StatusOr<ControlChannel::Message> m = urgent_->Receive();
    if (!m.ok()) {
      // The source closes it once post-copy completed; before that, a
      // closed urgent connection ends the session.
      if (!complete() && !stopping_.load(std::memory_order_acquire)) {
        Fail(base::Annotate(m.status(), "urgent connection"));
      }
      return;
    }
    absl::Status s =
        m->type == proto::ControlType::kPageData
            ? OnPageData(m->payload)
            : absl::InvalidArgumentError(absl::StrCat(
                  "urgent connection: unexpected ",
                  proto::ControlTypeName(m->type), " (only PAGE_DATA)"));
    if (!s.ok()) {
      Fail(base::Annotate(s, "urgent connection"));
      return;
    }
  }
}

absl::Status PostcopyTarget::OnPageData(absl::Span<const uint8_t> payload) {
  const std::vector<proto::RegionInfo> regions = table_.Describe();
  RAMFERRY_ASSIGN_OR_RETURN(proto::PageData d,
                            proto::DecodePageData(payload, regions));
  const size_t index = table_.IndexOf(*table_.Find(d.region_id));
  urgent_pages_.fetch_add(d.page_count, std::memory_order_relaxed);
  return d.zero ? PlaceZero(index, d.first_page, d.page_count)
                : Place(index, d.first_page, d.bytes.data(), d.page_count);
}

absl::Status PostcopyTarget::Place(size_t index, uint64_t first_page,
                                   const uint8_t* src, uint64_t pages) {
  absl::StatusOr<PlaceResult> r = placers_[index]->Place(
      first_page, src, pages, [&](uint64_t first, uint64_t end) {
        page_landings_.Placed(
            index, first, end - first,
            src + (first - first_page) * base::kSmallPageSize);
      });
  if (!r.ok()) return r.status();
  CountPlaced(r->placed);
  return absl::OkStatus();
}

absl::Status PostcopyTarget::PlaceZero(size_t index, uint64_t first_page,
                                       uint64_t pages) {
  absl::StatusOr<PlaceResult> r = placers_[index]->PlaceZero(
      first_page, pages, [&](uint64_t first, uint64_t end) {
        page_landings_.ZeroPlaced(index, first, end - first);
      });
  if (!r.ok()) return r.status();
  CountPlaced(r->placed);
  return absl::OkStatus();
}

void PostcopyTarget::CountPlaced(uint64_t placed) {
  if (remaining_.fetch_sub(placed, std::memory_order_acq_rel) != placed) {
    return;
  }
  duration_ns_.store(base::MonotonicNs() - armed_ns_,
                     std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

void PostcopyTarget::CompleterLoop() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] {
      return remaining_.load(std::memory_order_acquire) == 0 ||
             stopping_.load(std::memory_order_acquire);
    });
  }
  if (remaining_.load(std::memory_order_acquire) != 0) return;
  // The readers stop before the regions are unregistered: a reader that
  // still held a fault would otherwise resolve it against a plain region.
  for (auto& p : placers_) p->Shutdown();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return readers_live_ == 0; });
  }
  for (auto& p : placers_) {
    if (absl::Status s = p->Finish(); !s.ok()) {
      Fail(base::Annotate(s, "post-copy end"));
      return;
    }
  }
  complete_.store(true, std::memory_order_release);
  if (absl::Status s = SendFrame(
          false, proto::StartFrame(proto::ControlType::kPostcopyComplete));
      !s.ok()) {
    Fail(base::Annotate(s, "post-copy end"));
  }
}

void PostcopyTarget::Fail(const absl::Status& status) {
  // A thread told to stop was cut off by the teardown: not a new cause.
  if (!stopping_.load(std::memory_order_acquire)) failure_->Fail(status);
}

bool PostcopyTarget::IsResident(uint32_t region_id, uint64_t first_page,
                                uint64_t pages) const {
  const Region* r = table_.Find(region_id);
  if (r == nullptr) return false;
  if (!armed()) {
    return first_page < r->page_count() && pages > 0 &&
           pages <= r->page_count() - first_page;
  }
  return placers_[table_.IndexOf(*r)]->IsResident(first_page, pages);
}

absl::Status PostcopyTarget::WaitResident(uint32_t region_id,
                                          uint64_t first_page, uint64_t pages,
                                          absl::Time deadline) {
  const Region* r = table_.Find(region_id);
  if (r == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "WaitResident: no region %d in the session", region_id));
  }
  if (!armed()) {
    return IsResident(region_id, first_page, pages)
               ? absl::OkStatus()
               : absl::InvalidArgumentError(absl::StrFormat(
                     "WaitResident: pages [%d, +%d) are outside region %d",
                     first_page, pages, region_id));
  }
  absl::Status s =
      placers_[table_.IndexOf(*r)]->WaitResident(first_page, pages, deadline);
  if (absl::IsCancelled(s) && failure_->failed()) return failure_->status();
  return s;
}

absl::Status PostcopyTarget::RequestPages(uint32_t region_id,
                                          uint64_t first_page, uint64_t pages) {
  if (!armed()) {
    return absl::FailedPreconditionError(
        "RequestPages: the session is not in post-copy");
  }
  const Region* r = table_.Find(region_id);
  if (r == nullptr || first_page >= r->page_count() ||
      pages > r->page_count() - first_page) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RequestPages: pages [%d, +%d) are not inside region %d", first_page,
        pages, region_id));
  }
  if (complete()) return absl::OkStatus();
  const UffdPlacer& placer = *placers_[table_.IndexOf(*r)];
  proto::PageRequest q;
  q.region_id = region_id;
  auto flush = [&]() -> absl::Status {
    if (q.pages.empty()) return absl::OkStatus();
    requested_pages_.fetch_add(q.pages.size(), std::memory_order_relaxed);
    absl::Status s = SendRequest(q);
    if (base::IsEcho(s)) {
      // Detached, or its connection shut or cut under the send: asked
      // again when a session resumes.
      std::lock_guard<std::mutex> lock(conn_mu_);
      deferred_.emplace_back(region_id, std::move(q.pages));
      s = absl::OkStatus();
    }
    q.pages.clear();
    return s;
  };
  for (uint64_t p = first_page; p < first_page + pages; ++p) {
    if (placer.IsResident(p, 1)) continue;
    q.pages.push_back(p);
    if (q.pages.size() == proto::kMaxPageRequestPages) {
      RAMFERRY_RETURN_IF_ERROR(flush());
    }
  }
  return flush();
}

absl::StatusOr<uint64_t> PostcopyTarget::ReleaseAll() {
  uint64_t released = 0;
  if (!armed()) return released;
  for (auto& p : placers_) {
    RAMFERRY_ASSIGN_OR_RETURN(uint64_t n, p->ReleaseAll());
    released += n;
  }
  return released;
}

absl::Status PostcopyTarget::CheckFinished() const {
  if (!armed() || complete()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "FINISH during post-copy with %d of %d missing pages not placed; the "
      "source must complete post-copy first",
      remaining_.load(), missing_pages_));
}

void PostcopyTarget::Stop() {
  if (ended_.exchange(true)) return;
  // Wakes WaitResident for good (Cancelled); the readers see stopping_.
  for (auto& p : placers_) p->Shutdown();
  StopThreads();
  stopping_.store(true, std::memory_order_release);
}

PostcopyStats PostcopyTarget::stats() const {
  PostcopyStats out;
  if (!armed()) return out;
  out.started = true;
  out.urgent_channel = had_urgent_.load(std::memory_order_relaxed);
  out.missing_pages = missing_pages_;
  out.requested_pages = requested_pages_.load(std::memory_order_relaxed);
  out.urgent_pages = urgent_pages_.load(std::memory_order_relaxed);
  out.switch_ns = switch_ns_;
  out.resumes = resumes_.load(std::memory_order_relaxed);
  out.duration_ns = duration_ns_.load(std::memory_order_relaxed);
  if (out.duration_ns == 0 && !complete()) {
    out.duration_ns = base::MonotonicNs() - armed_ns_;
  }
  FaultLatencySnapshot latency;
  for (const auto& p : placers_) {
    UffdPlacerStats s = p->stats();
    out.duplicate_pages += s.duplicate_pages;
    out.fault_messages += s.fault_messages;
    out.local_zero_faults += s.local_zero_faults;
    latency.Merge(s.latency);
  }
  out.latency_buckets.assign(latency.buckets.begin(), latency.buckets.end());
  out.faults = latency.count;
  out.latency_p50_us = latency.p50_us();
  out.latency_p99_us = latency.p99_us();
  out.latency_max_us = latency.max_us();
  out.blocked_us = latency.total_blocked_us();
  return out;
}

}  // namespace ramferry::engine
