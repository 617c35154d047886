#include "engine/postcopy/postcopy_source.h"

#include <bit>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "base/zero_page.h"
#include "engine/postcopy/page_ranges.h"
#include "engine/region_table.h"

namespace ramferry::engine {

void PostcopySource::Shutdown() {
  if (urgent_ != nullptr) urgent_->Shutdown();
}

void PostcopySource::Stop() {
  Shutdown();
  if (urgent_thread_.joinable()) urgent_thread_.join();
}

void PostcopySource::CarryOver(const PostcopyStats& before) {
  resumes_ = before.resumes + 1;
  requested_pages_.store(before.requested_pages);
  urgent_pages_.store(before.urgent_pages);
  pushed_.store(before.pushed_pages);
  missing_.store(before.missing_pages);
  switch_ns_.store(before.switch_ns);
}

void PostcopySource::Begin(bool resume) {
  switch_start_ = absl::Now();
  region_infos_ = RegionTable(regions_).Describe();
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (const Region& r : regions_) {
      requested_.push_back(std::make_unique<DirtyBitmap>(r.page_count()));
    }
  }
  for (const Region& r : regions_) {
    push_.push_back(std::make_unique<DirtyBitmap>(r.page_count()));
  }
  if (resume) resume_checker_.emplace(region_infos_);
  // Last: the control thread takes requests once it sees this.
  started_.store(true);
}

void PostcopySource::BeginResume() { Begin(/*resume=*/true); }

absl::Status PostcopySource::BeginSwitch(
    absl::Span<DirtyBitmap* const> missing,
    absl::FunctionRef<absl::Status(const std::vector<uint8_t>&)> send) {
  Begin(/*resume=*/false);
  uint64_t total = 0;
  for (size_t r = 0; r < regions_.size(); ++r) {
    DirtyBitmap& push = *push_[r];
    for (size_t w = 0; w < push.words(); ++w) {
      push.OrWord(w, missing[r]->PeekWord(w));
    }
    total += push.Count();
    uint64_t from = 0;
    bool done = false;
    while (!done) {
      RangeScan scan = ScanRanges(push, from, proto::kMaxMissingRanges);
      from = scan.next_page;
      done = scan.done;
      proto::MissingPages m;
      m.region_id = regions_[r].id;
      m.last = done;
      m.ranges = std::move(scan.ranges);
      if (m.ranges.empty() && !m.last) continue;
      RAMFERRY_RETURN_IF_ERROR(send(proto::EncodeMissingPagesFrame(m)));
    }
  }
  missing_.store(total);
  return absl::OkStatus();
}

void PostcopySource::StartAnswering(
    std::function<void(const absl::Status&)> fail) {
  if (urgent_ == nullptr) return;
  urgent_thread_ =
      std::thread([this, fail = std::move(fail)] { UrgentLoop(fail); });
}

void PostcopySource::Armed() {
  armed_ns_ = base::MonotonicNs();
  // A resumed session keeps the switch time of the one it resumes.
  if (!resume_checker_.has_value()) {
    switch_ns_.store(static_cast<uint64_t>(
        absl::ToInt64Nanoseconds(absl::Now() - switch_start_)));
  }
}

void PostcopySource::Complete() {
  duration_ns_.store(base::MonotonicNs() - armed_ns_);
  Stop();
}

void PostcopySource::UrgentLoop(
    const std::function<void(const absl::Status&)>& fail) {
  RequestPathPriority priority;
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
      RAMFERRY_ASSIGN_OR_RETURN(
          proto::PageRequest q,
          proto::DecodePageRequest(m->payload, region_infos_));
      return AnswerRequest(q, priority);
    }();
    if (!s.ok()) {
      fail(s);
      return;
    }
  }
}

size_t PostcopySource::RegionIndex(uint32_t region_id) const {
  size_t index = 0;
  while (regions_[index].id != region_id) ++index;
  return index;
}

void PostcopySource::NoteRequest(const proto::PageRequest& q) {
  std::unique_lock<std::mutex> lock(mu_);
  ++hint_seq_;
  hint_region_ = RegionIndex(q.region_id);
  hint_page_ = q.pages.back();
}

absl::Status PostcopySource::AnswerRequest(const proto::PageRequest& q,
                                           RequestPathPriority& priority) {
  const size_t index = RegionIndex(q.region_id);
  const Region& region = regions_[index];
  requested_pages_.fetch_add(q.pages.size(), std::memory_order_relaxed);
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
    RAMFERRY_RETURN_IF_ERROR(urgent_->Send(
        proto::EncodePageData(region.id, q.pages[at], static_cast<uint32_t>(n),
                              zero ? nullptr : bytes)));
    urgent_pages_.fetch_add(n, std::memory_order_relaxed);
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

absl::Status PostcopySource::OnPageRequest(absl::Span<const uint8_t> payload) {
  if (urgent_ != nullptr || !started()) {
    return absl::InvalidArgumentError(
        "PAGE_REQUEST on the control connection out of turn");
  }
  RAMFERRY_ASSIGN_OR_RETURN(proto::PageRequest q,
                            proto::DecodePageRequest(payload, region_infos_));
  requested_pages_.fetch_add(q.pages.size(), std::memory_order_relaxed);
  NoteRequest(q);
  // Kept as a set, not as the requests: however many come, and however
  // often they repeat a page, what waits is a bit a page and a queue
  // entry a word of them.
  const size_t index = RegionIndex(q.region_id);
  std::unique_lock<std::mutex> lock(mu_);
  DirtyBitmap& asked = *requested_[index];
  for (uint64_t page : q.pages) {
    if (asked.PeekWord(page / 64) == 0) {
      requested_words_.emplace_back(index, page / 64);
    }
    asked.Set(page);
  }
  return absl::OkStatus();
}

absl::Status PostcopySource::OnResumeMissing(
    absl::Span<const uint8_t> payload) {
  if (!resume_checker_.has_value()) {
    return absl::InvalidArgumentError(
        "MISSING_PAGES from the destination, which only a resumed session "
        "takes");
  }
  RAMFERRY_ASSIGN_OR_RETURN(proto::MissingPages m,
                            proto::DecodeMissingPages(payload, region_infos_));
  RAMFERRY_RETURN_IF_ERROR(resume_checker_->Accept(m));
  MarkRanges(m.ranges, *push_[RegionIndex(m.region_id)]);
  return absl::OkStatus();
}

bool PostcopySource::may_arm() const {
  return started() &&
         (!resume_checker_.has_value() || resume_checker_->complete());
}

uint64_t PostcopySource::FillPushChunk(absl::Span<DirtyBitmap* const> chunk,
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

PostcopyStats PostcopySource::Stats() const {
  PostcopyStats p;
  p.urgent_channel = urgent_ != nullptr;
  p.missing_pages = missing_.load(std::memory_order_relaxed);
  p.requested_pages = requested_pages_.load(std::memory_order_relaxed);
  p.urgent_pages = urgent_pages_.load(std::memory_order_relaxed);
  p.pushed_pages = pushed_.load(std::memory_order_relaxed);
  p.switch_ns = switch_ns_.load(std::memory_order_relaxed);
  p.duration_ns = duration_ns_.load(std::memory_order_relaxed);
  p.resumes = resumes_;
  return p;
}

}  // namespace ramferry::engine
