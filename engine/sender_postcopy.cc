// The source's side of the post-copy switch: the urgent connection's
// set-up, the switch (MISSING_PAGES, then the destination's
// POSTCOPY_ARMED), and the push of every other missing page over the bulk
// channels in chunks, until the destination says it holds every page.
// What is post-copy's own (the sets, the urgent thread, the counters) is
// engine::PostcopySource's.
#include <mutex>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/status_util.h"
#include "channels/socket_dial.h"
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
  auto urgent = std::make_unique<ControlChannel>(*fd, options_.stall_timeout);
  proto::Hello hello = DataHello(0);
  hello.role = proto::Role::kUrgent;
  proto::SealKeys keys;
  absl::StatusOr<proto::HelloReply> reply =
      channels::ExchangeHello(*fd, hello, options_.auth_key, deadline, &keys);
  if (!reply.ok()) return Annotate(reply.status(), "urgent connection");
  if (absl::Status s = engine::SealControl(
          terms_.seal, options_.auth_key.empty() ? nullptr : &keys,
          engine::SealEnd::kSource, *urgent);
      !s.ok()) {
    return Annotate(s, "urgent connection");
  }
  postcopy_.SetUrgent(std::move(urgent));
  return absl::OkStatus();
}

absl::Status SenderImpl::CheckMissingSets(
    absl::Span<DirtyBitmap* const> missing) const {
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
  return absl::OkStatus();
}

absl::Status SenderImpl::StartPostcopy(absl::Span<DirtyBitmap* const> missing) {
  if (finished_) return absl::FailedPreconditionError("session is finished");
  if (failure_.failed()) return FinalStatus();
  if ((terms_.features & proto::kFeaturePostcopy) == 0) {
    return absl::FailedPreconditionError(
        "StartPostcopy: the session was opened without postcopy "
        "(SessionOptions::postcopy on both ends)");
  }
  if (postcopy_.started()) {
    return absl::FailedPreconditionError("StartPostcopy: called twice");
  }
  RAMFERRY_RETURN_IF_ERROR(CheckMissingSets(missing));
  RAMFERRY_RETURN_IF_ERROR(AwaitStartedRounds());
  // The destination places pages from here on (UFFDIO_COPY of whole
  // pages): nothing there applies a delta any more.
  delta_allowed_.store(false, std::memory_order_release);
  // The commit point: from the first MISSING_PAGES on, the destination
  // may arm and run the workload (set before the send, which may deliver
  // what it fails to report).
  commit_sent_.store(true, std::memory_order_release);
  if (absl::Status s =
          postcopy_.BeginSwitch(missing,
                                [&](const std::vector<uint8_t>& frame) {
                                  return control_->Send(frame);
                                });
      !s.ok()) {
    failure_.Fail(Annotate(s, "post-copy switch"));
    return CommitFailed(FinalStatus(), "the switch to post-copy");
  }
  StartAnsweringRequests();
  if (absl::Status s = AwaitArmed("post-copy switch"); !s.ok()) {
    return CommitFailed(s, "the switch to post-copy");
  }
  outcome_.store(CommitOutcome::kCommitted, std::memory_order_release);
  return absl::OkStatus();
}

void SenderImpl::StartAnsweringRequests() {
  // Once the destination holds every page, CompletePostcopy shuts the
  // urgent connection down under its thread, mid-read or mid-answer: that
  // ends the thread, not the session.
  postcopy_.StartAnswering([this](const absl::Status& s) {
    {
      std::unique_lock<std::mutex> lock(events_.mu);
      if (events_.postcopy_complete) return;
    }
    failure_.Fail(Annotate(s, "urgent connection"));
  });
}

absl::Status SenderImpl::AwaitArmed(const char* what) {
  if (absl::Status s = AwaitControl([&] { return events_.postcopy_armed; },
                                    options_.round_timeout, what);
      !s.ok()) {
    return s;
  }
  postcopy_.Armed();
  return absl::OkStatus();
}

void SenderImpl::ResumeFrom(const SenderImpl& cut) {
  terms_.resume = true;
  terms_.resumed_session = cut.terms_.session;
  // The cut session armed: the destination runs the workload already.
  commit_sent_.store(true, std::memory_order_release);
  outcome_.store(CommitOutcome::kCommitted, std::memory_order_release);
  postcopy_.CarryOver(cut.stats().postcopy);
}

absl::Status SenderImpl::AwaitResumed() {
  RAMFERRY_RETURN_IF_ERROR(AwaitArmed("post-copy resume"));
  StartAnsweringRequests();
  return absl::OkStatus();
}

absl::Status SenderImpl::CompletePostcopy() {
  bool armed;
  {
    std::unique_lock<std::mutex> lock(events_.mu);
    armed = events_.postcopy_armed;
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
    const uint64_t n = postcopy_.FillPushChunk(chunk, kPushChunkPages);
    if (n > 0) {
      postcopy_.Pushed(n);
      RAMFERRY_RETURN_IF_ERROR(StartRound(chunk));
    }
    if (n == 0 && started_.empty()) break;
    if (n == 0 || started_.size() >= kPushChunksInFlight) {
      RAMFERRY_RETURN_IF_ERROR(AwaitRound().status());
    }
  }
  if (absl::Status s = AwaitControl([&] { return events_.postcopy_complete; },
                                    options_.round_timeout, "post-copy end");
      !s.ok()) {
    return s;
  }
  // The destination holds every page: requests are over.
  postcopy_.Complete();
  return absl::OkStatus();
}

}  // namespace ramferry
