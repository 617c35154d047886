#include "ramferry/sender.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/status_util.h"
#include "engine/sender_impl.h"
#include "engine/untouched.h"
#include "proto/packet.h"

namespace ramferry {

using engine::ChannelSender;
using engine::CommandType;

void SenderImpl::OnFailure(const absl::Status& status, engine::Origin origin) {
  // The reason goes out before the sockets close, so the destination can
  // tell the cause from the echo (its channels seeing EOF).
  if (control_ != nullptr && origin == engine::Origin::kLocal) {
    control_->TrySend(proto::EncodeError(proto::MakeErrorMessage(status)),
                      absl::Seconds(1));
  }
  limiter_.Abort();
  for (auto& c : channels_) {
    c->ring().Abort();
    c->transport().Shutdown();
  }
  postcopy_.Shutdown();
  ShutdownStreams();
  events_.Wake();
}

absl::Status SenderImpl::FinalStatus() {
  absl::Status local = failure_.status();
  const bool local_is_peers = failure_.origin() == engine::Origin::kPeer;
  std::optional<absl::Status> peer;
  uint64_t confirmed;
  {
    std::unique_lock<std::mutex> lock(events_.mu);
    // Read the destination's last word before closing the control
    // connection: its ERROR (a local echo, such as a reset after the
    // destination refused a packet, is not the cause), or its close once
    // it learned of our failure; every RoundDone it sent comes before
    // either. Stopping at a local error without it could drop a RoundDone
    // already on the wire, and confirmed_rounds() would then miss a round
    // the destination confirmed. Short unless the destination is stalled.
    const auto until = std::chrono::steady_clock::now() +
                       absl::ToChronoNanoseconds(base::kRootCauseGrace);
    events_.cv.wait_until(lock, until, [&] {
      return local_is_peers || events_.peer_error || events_.control_closed;
    });
    peer = events_.peer_error;
    confirmed = events_.confirmed_rounds;
  }
  if (control_ != nullptr) control_->Shutdown();
  absl::Status s = local_is_peers ? local
                                  : base::PreferRootCause(
                                        local, peer.value_or(absl::OkStatus()));
  return absl::Status(
      s.code(),
      absl::StrFormat("%s [destination confirmed %d round%s]", s.message(),
                      confirmed, confirmed == 1 ? "" : "s"));
}

absl::Status SenderImpl::Barrier(CommandType type, uint64_t round) {
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (losses_.lost(i)) continue;
    ChannelSender& c = *channels_[i];
    const uint32_t seq = c.ring().PushBarrier(type, round);
    // Aborted: the session failed, or (surviving losses) this channel
    // died and its loss is queued.
    if (seq == 0) {
      if (!terms_.survive || failure_.failed()) return FinalStatus();
      continue;
    }
    last_seq_[i] = seq;
    if (options_.single_thread && !c.DrainInline().ok()) {
      return FinalStatus();
    }
  }
  return AwaitRings();
}

absl::Status SenderImpl::AwaitRings() {
  while (true) {
    for (size_t i = 0; i < channels_.size(); ++i) {
      if (last_seq_[i] == 0 || losses_.lost(i)) continue;
      if (!channels_[i]->ring().WaitBarrier(last_seq_[i])) {
        if (!terms_.survive || failure_.failed()) return FinalStatus();
        // The channel died: a ChannelSender queues its loss before it
        // aborts the ring, so HandleLosses below sees it.
      }
    }
    if (failure_.failed()) return FinalStatus();
    if (!terms_.survive || !losses_.pending()) return absl::OkStatus();
    RAMFERRY_RETURN_IF_ERROR(HandleLosses());
  }
}

std::vector<std::vector<proto::ZeroRange>> SenderImpl::UntouchedRanges(
    uint64_t round) {
  // Post-copy pushes its pages in rounds numbered from wherever pre-copy
  // stopped: a round 0 there carries only its chunk, not the regions.
  if (round != 0 || !options_.skip_untouched || terms_.survive ||
      postcopy_.started() ||
      (terms_.features & proto::kFeatureZeroPages) == 0 ||
      options_.packet_pages < 2) {
    return {};
  }
  std::vector<std::vector<proto::ZeroRange>> all(regions_.size());
  for (size_t r = 0; r < regions_.size(); ++r) {
    // Best effort: a region the kernel cannot describe is sent in full
    // (its zero pages still go as offsets).
    absl::StatusOr<std::vector<engine::ByteRange>> found =
        engine::FindUntouchedRanges(regions_[r]);
    if (!found.ok()) continue;
    all[r].reserve(found->size());
    for (const engine::ByteRange& b : *found) {
      all[r].push_back({b.offset, b.length});
    }
  }
  return all;
}

absl::StatusOr<RoundResult> SenderImpl::SendRound(
    absl::Span<DirtyBitmap* const> dirty) {
  if (finished_) return absl::FailedPreconditionError("session is finished");
  if (failure_.failed()) return FinalStatus();
  if (!started_.empty()) {
    return absl::FailedPreconditionError(
        "SendRound with started rounds not awaited: AwaitRound them first");
  }
  return RunRound(dirty);
}

absl::StatusOr<RoundResult> SenderImpl::RunRound(
    absl::Span<DirtyBitmap* const> dirty) {
  const absl::Time start = absl::Now();
  const uint64_t round = next_round_;
  if (terms_.survive) {
    ledger_->ClearAll();
    open_round_ = round;
    // Losses since the last round: their extra SYNCs belong to this one.
    RAMFERRY_RETURN_IF_ERROR(HandleLosses());
  }
  absl::StatusOr<engine::Scheduler::Scheduled> sent =
      scheduler_->ScheduleRound(dirty, round, UntouchedRanges(round));
  if (!sent.ok()) {
    if (failure_.failed()) return FinalStatus();
    if (absl::IsAborted(sent.status()) && terms_.survive) {
      // Every channel died while scheduling: declaring them ends it.
      RAMFERRY_RETURN_IF_ERROR(HandleLosses());
      return FinalStatus();
    }
    return sent.status();  // a bad argument: nothing was taken
  }
  RAMFERRY_RETURN_IF_ERROR(Barrier(CommandType::kSync, round));
  const absl::Time deadline = absl::Now() + options_.round_timeout;
  while (true) {
    if (absl::Status s = AwaitControl(
            [&] {
              return events_.confirmed_rounds > round || losses_.pending();
            },
            std::max(deadline - absl::Now(), absl::ZeroDuration()),
            absl::StrFormat("round %d", round));
        !s.ok()) {
      return s;
    }
    {
      std::unique_lock<std::mutex> lock(events_.mu);
      if (events_.confirmed_rounds > round) break;
    }
    // A channel died before the destination confirmed the round.
    RAMFERRY_RETURN_IF_ERROR(HandleLosses());
    RAMFERRY_RETURN_IF_ERROR(AwaitRings());
  }
  open_round_.reset();
  RAMFERRY_RETURN_IF_ERROR(CheckApplied(round, sent->pages));
  ++next_round_;
  return RoundResult{round, sent->pages, sent->bytes, absl::Now() - start};
}

absl::Status SenderImpl::CheckApplied(uint64_t round, uint64_t sent_pages) {
  uint64_t applied;
  {
    std::unique_lock<std::mutex> lock(events_.mu);
    if (events_.confirmed_pages.empty()) {
      return absl::InternalError(
          absl::StrFormat("round %d confirmed without a page count", round));
    }
    applied = events_.confirmed_pages.front();
    events_.confirmed_pages.pop_front();
  }
  if (applied != sent_pages) {
    failure_.Fail(absl::DataLossError(absl::StrFormat(
        "round %d: destination applied %d pages, source sent %d", round,
        applied, sent_pages)));
    return FinalStatus();
  }
  return absl::OkStatus();
}

absl::Status SenderImpl::StartRound(absl::Span<DirtyBitmap* const> dirty) {
  if (finished_) return absl::FailedPreconditionError("session is finished");
  if (failure_.failed()) return FinalStatus();
  // Rounds go one at a time, the result kept for AwaitRound, where
  // re-sending a lost channel's batches needs the open round to be the
  // only one, and where pages are placed remotely (RDMA WRITE): those land
  // without waiting at the destination's barrier, so a page of the next
  // round on one channel could land before, and be overwritten by, its
  // copy of this round still in flight on another (queue pairs are not
  // ordered with each other). Once a round is confirmed, every channel's
  // WRITEs of it have landed: each channel's SYNC follows them on its
  // queue pair.
  // Each round started so is confirmed already: its result waits in
  // started_ for its AwaitRound, in order. With deltas too: a channel
  // refreshes a page's cached copy as it sends it, so the round that sent
  // the copy before must be on the wire (its SYNC flushed) and applied at
  // the destination first.
  if (terms_.survive || Has(channels::kCapRemotePlacement) ||
      delta_cache_ != nullptr) {
    RAMFERRY_ASSIGN_OR_RETURN(RoundResult r, RunRound(dirty));
    started_.push_back({r.round, r.pages, r.bytes, absl::Now(), r});
    return absl::OkStatus();
  }
  const absl::Time start = absl::Now();
  const uint64_t round = next_round_;
  absl::StatusOr<engine::Scheduler::Scheduled> sent =
      scheduler_->ScheduleRound(dirty, round, UntouchedRanges(round));
  if (!sent.ok()) {
    if (failure_.failed()) return FinalStatus();
    return sent.status();  // a bad argument: nothing was taken
  }
  // The SYNCs ride the rings behind the round's batches; the next round's
  // batches may follow them at once: the destination holds every channel
  // at its SYNC until all arrived, so no page of the next round lands
  // before this round's copy of it.
  for (size_t i = 0; i < channels_.size(); ++i) {
    ChannelSender& c = *channels_[i];
    const uint32_t seq = c.ring().PushBarrier(CommandType::kSync, round);
    if (seq == 0) return FinalStatus();
    last_seq_[i] = seq;
    if (options_.single_thread && !c.DrainInline().ok()) return FinalStatus();
  }
  ++next_round_;
  started_.push_back({round, sent->pages, sent->bytes, start, std::nullopt});
  return absl::OkStatus();
}

absl::StatusOr<RoundResult> SenderImpl::AwaitRound() {
  if (started_.empty()) {
    return absl::FailedPreconditionError("no round was started");
  }
  const StartedRound r = started_.front();
  started_.pop_front();
  if (r.done.has_value()) return *r.done;
  if (absl::Status s = AwaitControl(
          [&] { return events_.confirmed_rounds > r.round; },
          options_.round_timeout, absl::StrFormat("round %d", r.round));
      !s.ok()) {
    return s;
  }
  RAMFERRY_RETURN_IF_ERROR(CheckApplied(r.round, r.pages));
  return RoundResult{r.round, r.pages, r.bytes, absl::Now() - r.start};
}

absl::Status SenderImpl::AwaitStartedRounds() {
  while (!started_.empty()) {
    if (absl::StatusOr<RoundResult> r = AwaitRound(); !r.ok()) {
      return r.status();
    }
  }
  return absl::OkStatus();
}

absl::Status SenderImpl::Finish() {
  if (finished_) return absl::OkStatus();
  if (failure_.failed()) return FinalStatus();
  RAMFERRY_RETURN_IF_ERROR(AwaitStartedRounds());
  RAMFERRY_RETURN_IF_ERROR(CheckStreamsEnded());
  finishing_ = true;
  if (terms_.survive) {
    RAMFERRY_RETURN_IF_ERROR(HandleLosses());
  }
  RAMFERRY_RETURN_IF_ERROR(Barrier(CommandType::kFinish, next_round_));
  // From here the destination may commit at any moment, and a lost
  // confirmation looks like any other failure: it is set before the send,
  // since a send that fails may still have delivered the message.
  finish_sent_.store(true, std::memory_order_release);
  commit_sent_.store(true, std::memory_order_release);
  absl::Status s = control_->Send(proto::EncodeFinish());
  if (!s.ok()) {
    failure_.Fail(s);
    s = FinalStatus();
  } else {
    s = AwaitControl([&] { return events_.finish_acked; },
                     options_.round_timeout, "finish");
  }
  if (!s.ok()) return CommitFailed(s, "FINISH");
  outcome_.store(CommitOutcome::kCommitted, std::memory_order_release);
  finished_ = true;
  for (auto& c : channels_) c->Join();
  control_->Shutdown();
  heartbeat_->Stop();
  control_thread_.join();
  // Channels that died after their FINISH barrier: every round was
  // confirmed, so nothing was missing; they are still reported.
  losses_.RecordUndeclared(next_round_);
  return absl::OkStatus();
}

bool SenderImpl::RefusedBeforeConfirmed(bool confirmed) const {
  // The destination sends an ERROR only before its commit point, never
  // between it and the confirmation (ReceiverImpl::Commit, ArmGate), and
  // the confirmation only after it: its ERROR read before the
  // confirmation proves it did not commit. On a sealed session the
  // control channel's tag proves the ERROR is the destination's (a forged
  // frame fails the session with a tag error instead, and the outcome
  // stays unknown); an unsealed session takes it at its word, as it takes
  // every page and ROUND_DONE.
  return events_.peer_error.has_value() && !confirmed;
}

absl::Status SenderImpl::CommitFailed(const absl::Status& cause,
                                      const char* what) {
  bool refused, armed;
  {
    std::unique_lock<std::mutex> lock(events_.mu);
    armed = events_.postcopy_armed;
    refused = RefusedBeforeConfirmed(armed || events_.finish_acked);
  }
  if (armed) {
    // Post-copy armed before this FINISH: the destination runs the
    // workload, whatever it says now.
    outcome_.store(CommitOutcome::kCommitted, std::memory_order_release);
    return base::Annotate(
        cause,
        "the destination took the workload over at post-copy's switch; do "
        "not resume the source's workload");
  }
  if (refused) {
    outcome_.store(CommitOutcome::kNotCommitted, std::memory_order_release);
    // The destination's word first, as after a failure before the commit
    // point: the cause is its own.
    return absl::Status(
        cause.code(),
        absl::StrFormat("%s; not committed: the destination refused %s and "
                        "discards what it received; the source's workload "
                        "may resume",
                        cause.message(), what));
  }
  outcome_.store(CommitOutcome::kUnknown, std::memory_order_release);
  return base::Annotate(
      cause, absl::StrFormat(
                 "the outcome is unknown: %s was sent, so the destination may "
                 "have committed and be running the memory; do not resume "
                 "the source's workload",
                 what));
}

CommitOutcome SenderImpl::commit_outcome() const {
  const CommitOutcome o = outcome_.load(std::memory_order_acquire);
  if (o != CommitOutcome::kPending) return o;
  // Failed before the commit point: the destination cannot commit.
  if (failure_.failed() && !commit_sent_.load(std::memory_order_acquire)) {
    return CommitOutcome::kNotCommitted;
  }
  return CommitOutcome::kPending;
}

SessionStats SenderImpl::stats() const {
  SessionStats s;
  for (size_t i = 0; i < channels_.size(); ++i) {
    s.channels.emplace_back();
    channels_[i]->ExportStats(&s.channels.back());
    s.channels.back().endpoint = terms_.endpoints[i];
  }
  s.rounds = confirmed_rounds();
  s.channels_lost = losses_.reports();
  for (const ChannelLoss& l : s.channels_lost) {
    if (l.channel < s.channels.size()) s.channels[l.channel].lost = 1;
  }
  s.resent_pages = losses_.resent_pages();
  AddStreamStats(&s);
  std::unique_lock<std::mutex> lock(events_.mu);
  if (events_.postcopy_armed) {
    s.postcopy = postcopy_.Stats();
    s.postcopy.started = true;
  }
  return s;
}

absl::StatusOr<std::unique_ptr<Sender>> Sender::Connect(
    const SessionOptions& options, absl::Span<const Region> regions) {
  auto impl = std::make_unique<SenderImpl>(options, regions);
  RAMFERRY_RETURN_IF_ERROR(impl->Setup());
  return std::unique_ptr<Sender>(new Sender(std::move(impl)));
}

Sender::Sender(std::unique_ptr<SenderImpl> impl) : impl_(std::move(impl)) {}
Sender::~Sender() = default;

absl::StatusOr<RoundResult> Sender::SendRound(
    absl::Span<DirtyBitmap* const> dirty) {
  return impl_->SendRound(dirty);
}
absl::Status Sender::StartRound(absl::Span<DirtyBitmap* const> dirty) {
  return impl_->StartRound(dirty);
}
absl::StatusOr<RoundResult> Sender::AwaitRound() { return impl_->AwaitRound(); }
absl::Status Sender::StartVerify() { return impl_->StartVerify(); }
void Sender::NoteMemoryFrozen() { impl_->NoteMemoryFrozen(); }
absl::StatusOr<VerifyReport> Sender::Verify() { return impl_->Verify(); }
absl::Status Sender::Finish() { return impl_->Finish(); }
absl::Status Sender::StartPostcopy(absl::Span<DirtyBitmap* const> missing) {
  return impl_->StartPostcopy(missing);
}
absl::Status Sender::CompletePostcopy() { return impl_->CompletePostcopy(); }
absl::StatusOr<uint32_t> Sender::CarryStream(int fd) {
  return impl_->CarryStream(fd);
}
absl::StatusOr<bool> Sender::AwaitStreams(absl::Time deadline) {
  return impl_->AwaitStreams(deadline);
}

absl::StatusOr<std::unique_ptr<Sender>> Sender::ResumePostcopy(
    const SessionOptions& options, absl::Span<const Region> regions,
    const Sender& cut) {
  if (!cut.stats().postcopy.started) {
    return absl::FailedPreconditionError(
        "ResumePostcopy: the cut session never switched to post-copy");
  }
  // The destination takes a resume once it has noticed the loss and wound
  // the cut session down; until then it refuses (the session still in
  // progress, then unavailable while it winds down), so those are retried,
  // as a refused connection is, for connect_timeout.
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  while (true) {
    auto impl = std::make_unique<SenderImpl>(options, regions);
    impl->ResumeFrom(*cut.impl_);
    absl::Status s = impl->Setup();
    if (s.ok()) s = impl->AwaitResumed();
    if (s.ok()) return std::unique_ptr<Sender>(new Sender(std::move(impl)));
    if ((!absl::IsUnavailable(s) && !absl::IsResourceExhausted(s)) ||
        absl::Now() >= deadline) {
      return base::Annotate(s, "post-copy resume");
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}
void Sender::Abort(const absl::Status& reason) { impl_->Abort(reason); }
void Sender::SetMaxBandwidth(uint64_t bytes_per_second) {
  impl_->SetMaxBandwidth(bytes_per_second);
}
SessionStats Sender::stats() const { return impl_->stats(); }
uint64_t Sender::confirmed_rounds() const { return impl_->confirmed_rounds(); }
bool Sender::finish_sent() const { return impl_->finish_sent(); }
CommitOutcome Sender::commit_outcome() const { return impl_->commit_outcome(); }

const char* CommitOutcomeName(CommitOutcome outcome) {
  switch (outcome) {
    case CommitOutcome::kPending:
      return "pending";
    case CommitOutcome::kCommitted:
      return "committed";
    case CommitOutcome::kNotCommitted:
      return "not-committed";
    case CommitOutcome::kUnknown:
      return "unknown";
  }
  return "?";
}
std::vector<std::string> Sender::warnings() const { return impl_->warnings(); }

}  // namespace ramferry
