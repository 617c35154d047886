// The source's post-copy: the switch (MISSING_PAGES, then the
// destination's POSTCOPY_ARMED), the urgent thread that answers page
// requests from this side's memory, and the push of every other missing
// page over the bulk channels in chunks that restart near the latest
// request, until the destination says it holds every page.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "base/counters.h"
#include "base/status_util.h"
#include "base/zero_page.h"
#include "channels/socket_dial.h"
#include "engine/postcopy/page_ranges.h"
#include "engine/postcopy/thread_priority.h"
#include "engine/region_table.h"
#include "engine/sender_impl.h"
#include "engine/stream_seal.h"

namespace ramferry {

using base::Annotate;
using engine::ControlChannel;

namespace {

// Pages a push chunk (one round) carries: small enough that a restart
// near a request takes effect soon, large enough that the round's SYNC is
// a small share (16 MiB of 4 KiB pages; two chunks are kept in flight).
constexpr uint64_t kPushChunkPages = 4096;
constexpr size_t kPushChunksInFlight = 2;

}  // namespace

absl::Status SenderImpl::OpenUrgent(absl::Time deadline) {
  absl::StatusOr<int> fd = channels::ConnectWithRetry(
      options_.host, options_.port, options_.connect_timeout);
  if (!fd.ok()) return Annotate(fd.status(), "urgent connection");
  urgent_ = std::make_unique<ControlChannel>(*fd, options_.stall_timeout);
  proto::Hello hello = DataHello(0);
  hello.role = proto::Role::kUrgent;
  proto::SealKeys keys;
  absl::StatusOr<proto::HelloReply> reply =
      channels::ExchangeHello(*fd, hello, options_.auth_key, deadline, &keys);
  if (!reply.ok()) return Annotate(reply.status(), "urgent connection");
  return Annotate(
      engine::SealControl(seal_, options_.auth_key.empty() ? nullptr : &keys,
                          engine::SealEnd::kSource, *urgent_),
      "urgent connection");
}

absl::Status SenderImpl::StartPostcopy(absl::Span<DirtyBitmap* const> missing) {
  if (finished_) return absl::FailedPreconditionError("session is finished");
  if (failure_.failed()) return FinalStatus();
  if ((capabilities_ & proto::kFeaturePostcopy) == 0) {
    return absl::FailedPreconditionError(
        "StartPostcopy: the session was opened without postcopy "
        "(SessionOptions::postcopy on both ends)");
  }
  if (postcopy_started_.load()) {
    return absl::FailedPreconditionError("StartPostcopy: called twice");
  }
  if (missing.size() != regions_.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("StartPostcopy: %d bitmaps for %d regions",
                        missing.size(), regions_.size()));
  }
  for (size_t r = 0; r < regions_.size(); ++r) {
    if (missing[r] == nullptr ||
        missing[r]->pages() != regions_[r].page_count()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "StartPostcopy: bitmap %d does not match region %d's %d pages", r,
          regions_[r].id, regions_[r].page_count()));
    }
  }
  if (absl::Status s = AwaitStartedRounds(); !s.ok()) return s;
  postcopy_start_ = absl::Now();
  region_infos_ = engine::RegionTable(regions_).Describe();
  MakeRequestedSets();
  postcopy_started_.store(true);
  uint64_t total = 0;
  for (size_t r = 0; r < regions_.size(); ++r) {
    auto push = std::make_unique<DirtyBitmap>(regions_[r].page_count());
    for (size_t w = 0; w < push->words(); ++w) {
      push->OrWord(w, missing[r]->PeekWord(w));
    }
    const uint64_t n = push->Count();
    total += n;
    push_.push_back(std::move(push));
    // The set as ranges, a message at a time, so no whole list is built.
    uint64_t from = 0;
    bool done = false;
    while (!done) {
      engine::RangeScan scan =
          engine::ScanRanges(*push_.back(), from, proto::kMaxMissingRanges);
      from = scan.next_page;
      done = scan.done;
      proto::MissingPages m;
      m.region_id = regions_[r].id;
      m.last = done;
      m.ranges = std::move(scan.ranges);
      if (m.ranges.empty() && !m.last) continue;
      if (absl::Status s = control_->Send(proto::EncodeMissingPagesFrame(m));
          !s.ok()) {
        failure_.Fail(Annotate(s, "post-copy switch"));
        return FinalStatus();
      }
    }
  }
  pc_missing_.store(total);
  if (urgent_ != nullptr) {
    urgent_thread_ = std::thread([this] { UrgentLoop(); });
  }
  if (absl::Status s = AwaitControl([&] { return postcopy_armed_; },
                                    options_.round_timeout, "post-copy switch");
      !s.ok()) {
    return s;
  }
  armed_ns_ = base::MonotonicNs();
  pc_switch_ns_.store(static_cast<uint64_t>(
      absl::ToInt64Nanoseconds(absl::Now() - postcopy_start_)));
  return absl::OkStatus();
}

void SenderImpl::UrgentLoop() {
  engine::RequestPathPriority priority;
  // Once the destination holds every page, CompletePostcopy shuts the
  // connection down under this thread, mid-read or mid-answer: that ends
  // the loop, not the session.
  auto fail = [&](const absl::Status& s) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (postcopy_complete_) return;
    }
    failure_.Fail(Annotate(s, "urgent connection"));
  };
  while (true) {
    if (!urgent_->Readable()) priority.Idle();
    absl::StatusOr<ControlChannel::Message> m = urgent_->Receive();
    if (!m.ok()) {
      fail(m.status());
      return;
    }
    absl::Status s = m->type != proto::ControlType::kPageRequest
                         ? absl::InvalidArgumentError(absl::StrCat(
                               "unexpected ", proto::ControlTypeName(m->type),
                               " (only PAGE_REQUEST)"))
                         : [&]() -> absl::Status {
      absl::StatusOr<proto::PageRequest> q =
          proto::DecodePageRequest(m->payload, region_infos_);
      if (!q.ok()) return q.status();
      return AnswerRequest(*q, priority);
    }();
    if (!s.ok()) {
      fail(s);
      return;
    }
  }
}

size_t SenderImpl::RegionIndex(uint32_t region_id) const {
  size_t index = 0;
  while (regions_[index].id != region_id) ++index;
  return index;
}

void SenderImpl::NoteRequest(const proto::PageRequest& q) {
  std::unique_lock<std::mutex> lock(mu_);
  ++hint_seq_;
  hint_region_ = RegionIndex(q.region_id);
  hint_page_ = q.pages.back();
}

absl::Status SenderImpl::AnswerRequest(const proto::PageRequest& q,
                                       engine::RequestPathPriority& priority) {
  const size_t index = RegionIndex(q.region_id);
  const Region& region = regions_[index];
  pc_requested_.fetch_add(q.pages.size(), std::memory_order_relaxed);
  // The answer first, the bookkeeping after: the faulting thread waits.
  size_t at = 0;
  while (at < q.pages.size()) {
    size_t n = 1;
    while (at + n < q.pages.size() && n < proto::kMaxPageDataPages &&
           q.pages[at + n] == q.pages[at] + n) {
      ++n;
    }
    const auto* bytes = static_cast<const uint8_t*>(region.page(q.pages[at]));
    const bool zero = base::IsAllZero(bytes, n * region.page_size);
    if (absl::Status s = urgent_->Send(proto::EncodePageData(
            region.id, q.pages[at], static_cast<uint32_t>(n),
            zero ? nullptr : bytes));
        !s.ok()) {
      return s;
    }
    pc_urgent_.fetch_add(n, std::memory_order_relaxed);
    priority.Worked();
    at += n;
  }
  // Answered: the push need not send them again.
  for (uint64_t page : q.pages) {
    push_[index]->TakeBits(page / 64, uint64_t{1} << (page % 64));
  }
  NoteRequest(q);
  return absl::OkStatus();
}

absl::Status SenderImpl::OnPageRequest(absl::Span<const uint8_t> payload) {
  if (urgent_ != nullptr || !postcopy_started_.load()) {
    return absl::InvalidArgumentError(
        "PAGE_REQUEST on the control connection out of turn");
  }
  absl::StatusOr<proto::PageRequest> q =
      proto::DecodePageRequest(payload, region_infos_);
  if (!q.ok()) return q.status();
  pc_requested_.fetch_add(q->pages.size(), std::memory_order_relaxed);
  NoteRequest(*q);
  // Kept as a set, not as the requests: however many come, and however
  // often they repeat a page, what waits is a bit a page and a queue
  // entry a word of them.
  const size_t index = RegionIndex(q->region_id);
  std::unique_lock<std::mutex> lock(mu_);
  DirtyBitmap& asked = *requested_[index];
  for (uint64_t page : q->pages) {
    if (asked.PeekWord(page / 64) == 0) {
      requested_words_.emplace_back(index, page / 64);
    }
    asked.Set(page);
  }
  cv_.notify_all();
  return absl::OkStatus();
}

void SenderImpl::MakeRequestedSets() {
  std::unique_lock<std::mutex> lock(mu_);
  for (const Region& r : regions_) {
    requested_.push_back(std::make_unique<DirtyBitmap>(r.page_count()));
  }
}

uint64_t SenderImpl::FillPushChunk(absl::Span<DirtyBitmap* const> chunk,
                                   uint64_t max_pages) {
  uint64_t taken = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Requested pages first, a word at a time, in the order asked; a
    // word's pages already pushed or answered since are not sent again.
    while (!requested_words_.empty() && taken < max_pages) {
      const auto [index, w] = requested_words_.front();
      requested_words_.pop_front();
      const uint64_t bits =
          push_[index]->TakeBits(w, requested_[index]->TakeWord(w));
      if (bits != 0) {
        chunk[index]->OrWord(w, bits);
        taken += static_cast<uint64_t>(std::popcount(bits));
      }
    }
    // Locality: the push goes on from the latest request, where the
    // destination's threads are likely to fault next.
    if (hint_seq_ != seen_hint_seq_) {
      seen_hint_seq_ = hint_seq_;
      push_region_ = hint_region_;
      push_word_ = hint_page_ / 64;
    }
  }
  size_t words_total = 0;
  for (const auto& p : push_) words_total += p->words();
  for (size_t scanned = 0; scanned < words_total && taken < max_pages;
       ++scanned) {
    if (push_word_ >= push_[push_region_]->words()) {
      push_region_ = (push_region_ + 1) % push_.size();
      push_word_ = 0;
    }
    const uint64_t bits = push_[push_region_]->TakeWord(push_word_);
    if (bits != 0) {
      chunk[push_region_]->OrWord(push_word_, bits);
      taken += static_cast<uint64_t>(std::popcount(bits));
    }
    ++push_word_;
  }
  return taken;
}

void SenderImpl::ResumeFrom(const SenderImpl& cut) {
  resume_ = true;
  resume_session_ = cut.session_;
  const SessionStats before = cut.stats();
  resumes_ = before.postcopy.resumes + 1;
  pc_requested_.store(before.postcopy.requested_pages);
  pc_urgent_.store(before.postcopy.urgent_pages);
  pc_pushed_.store(before.postcopy.pushed_pages);
  pc_missing_.store(before.postcopy.missing_pages);
  pc_switch_ns_.store(before.postcopy.switch_ns);
}

absl::Status SenderImpl::OnResumeMissing(absl::Span<const uint8_t> payload) {
  if (!resume_checker_.has_value()) {
    return absl::InvalidArgumentError(
        "MISSING_PAGES from the destination, which only a resumed session "
        "takes");
  }
  absl::StatusOr<proto::MissingPages> m =
      proto::DecodeMissingPages(payload, region_infos_);
  if (!m.ok()) return m.status();
  if (absl::Status s = resume_checker_->Accept(*m); !s.ok()) return s;
  engine::MarkRanges(m->ranges, *push_[RegionIndex(m->region_id)]);
  return absl::OkStatus();
}

absl::Status SenderImpl::AwaitResumed() {
  if (absl::Status s = AwaitControl([&] { return postcopy_armed_; },
                                    options_.round_timeout, "post-copy resume");
      !s.ok()) {
    return s;
  }
  armed_ns_ = base::MonotonicNs();
  if (urgent_ != nullptr) {
    urgent_thread_ = std::thread([this] { UrgentLoop(); });
  }
  return absl::OkStatus();
}

absl::Status SenderImpl::CompletePostcopy() {
  bool armed;
  {
    std::unique_lock<std::mutex> lock(mu_);
    armed = postcopy_armed_;
  }
  if (!armed) {
    return absl::FailedPreconditionError(
        "CompletePostcopy: StartPostcopy did not switch the session");
  }
  if (failure_.failed()) return FinalStatus();
  std::vector<std::unique_ptr<DirtyBitmap>> chunks;
  std::vector<DirtyBitmap*> chunk;
  for (const Region& r : regions_) {
    chunks.push_back(std::make_unique<DirtyBitmap>(r.page_count()));
    chunk.push_back(chunks.back().get());
  }
  while (true) {
    const uint64_t n = FillPushChunk(chunk, kPushChunkPages);
    if (n > 0) {
      pc_pushed_.fetch_add(n, std::memory_order_relaxed);
      if (absl::Status s = StartRound(chunk); !s.ok()) return s;
    }
    if (n == 0 && started_.empty()) break;
    if (n == 0 || started_.size() >= kPushChunksInFlight) {
      absl::StatusOr<RoundResult> r = AwaitRound();
      if (!r.ok()) return r.status();
    }
  }
  if (absl::Status s = AwaitControl([&] { return postcopy_complete_; },
                                    options_.round_timeout, "post-copy end");
      !s.ok()) {
    return s;
  }
  pc_duration_ns_.store(base::MonotonicNs() - armed_ns_);
  // The destination holds every page: requests are over.
  if (urgent_ != nullptr) {
    urgent_->Shutdown();
    if (urgent_thread_.joinable()) urgent_thread_.join();
  }
  return absl::OkStatus();
}

}  // namespace ramferry
