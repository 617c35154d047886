// Surviving channel loss on the source side: a channel that died is
// declared gone to the destination, and its share of the open round goes
// again on the live channels.
#include <algorithm>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "engine/sender_impl.h"

namespace ramferry {

using engine::ChannelSender;
using engine::CommandType;

void SenderImpl::OnChannelLoss(uint32_t channel, const absl::Status& cause) {
  losses_.Report(channel, cause);
  events_.Wake();
  // Queued first: a producer woken by the abort finds the loss. The
  // channel stops now, not when the caller thread gets to it: when only
  // the destination saw the death, the channel's sends may block on a
  // peer that no longer reads, with the producer waiting on its ring.
  ChannelSender& c = *channels_[channel];
  c.ring().Abort();
  c.transport().Shutdown();
}

absl::Status SenderImpl::HandleLosses() {
  while (std::optional<std::pair<uint32_t, absl::Status>> loss =
             losses_.TakeNext()) {
    RAMFERRY_RETURN_IF_ERROR(DeclareGone(loss->first, loss->second));
  }
  return absl::OkStatus();
}

// Why re-sending is enough for the destination to end each round
// byte-identical:
//  - The channel's thread here is joined before anything is re-sent, and
//    the destination stops (joins) its receive thread for the channel
//    before it answers CHANNEL_GONE, and before the round can complete
//    without it. So no packet of the dead channel is applied after the
//    round is confirmed: a page re-sent in a later round cannot be
//    overwritten by a stale copy.
//  - Within the round, a page of the dead channel may land twice (the
//    original, perhaps in part, and the re-sent copy, on another
//    channel's thread), in either order. Both copies were read from the
//    source after the page's dirty bit was taken for this round. In the
//    final round of a migration the workload is paused, so the two are
//    the same bytes and any interleaving leaves the source's page. In an
//    earlier round, a page that changed between the two reads was written
//    after its bit was taken, so dirty tracking marked it again: it goes
//    in the next round, which the round barrier orders after this one.
//  - Every page of the round is counted once at the destination: the
//    dead channel's pages in the round no longer count there, and its
//    whole share is re-sent (SentLedger), so the pages the destination
//    confirms still equal the pages scheduled.
absl::Status SenderImpl::DeclareGone(uint32_t channel,
                                     const absl::Status& cause) {
  ChannelSender& dead = *channels_[channel];
  dead.ring().Abort();
  dead.transport().Shutdown();
  dead.Join();
  uint64_t declared;
  {
    std::unique_lock<std::mutex> lock(events_.mu);
    declared = events_.confirmed_rounds;
  }
  const std::string losses = losses_.Declare(channel, declared, cause);
  if (losses_.live() == 0) {
    failure_.Fail(absl::UnavailableError(
        absl::StrFormat("all %d channels lost: %s", channels_.size(), losses)));
    return FinalStatus();
  }
  RAMFERRY_ASSIGN_OR_RETURN(uint64_t effective,
                            AgreeGone(channel, declared, cause));
  return ResendShare(channel, effective);
}

absl::StatusOr<uint64_t> SenderImpl::AgreeGone(uint32_t channel,
                                               uint64_t declared,
                                               const absl::Status& cause) {
  proto::ChannelLoss gone;
  gone.channel = channel;
  gone.round = declared;
  gone.code = static_cast<uint16_t>(cause.code());
  gone.text = std::string(cause.message());
  if (absl::Status s = control_->Send(proto::EncodeChannelGone(gone));
      !s.ok()) {
    failure_.Fail(s);
    return FinalStatus();
  }
  if (absl::Status s = AwaitControl(
          [&] { return losses_.acknowledged(channel).has_value(); },
          options_.stall_timeout,
          absl::StrFormat("declaring channel %d gone", channel));
      !s.ok()) {
    return s;
  }
  const uint64_t effective = *losses_.acknowledged(channel);
  // Reported as the round the session went on without the channel, as the
  // destination reports it.
  losses_.Settle(channel, effective);
  if (effective != declared && effective != declared + 1) {
    failure_.Fail(absl::InvalidArgumentError(absl::StrFormat(
        "destination put channel %d gone as of round %d; it was declared "
        "gone as of round %d",
        channel, effective, declared)));
    return FinalStatus();
  }
  return effective;
}

absl::Status SenderImpl::ResendShare(uint32_t channel, uint64_t effective) {
  // A session of streams has no rounds: its streams move instead.
  if (options_.streams) return ResendStreams(channel);
  // What the lost channel sent in the round may never have landed: its
  // copies are forgotten, so the re-sent batches go whole.
  if (delta_cache_ != nullptr) delta_cache_->ForgetSentBy(channel, effective);
  // The destination completed the declared round with this channel's SYNC
  // before the declaration arrived: nothing of that round is missing.
  if (open_round_ && effective == *open_round_) {
    absl::StatusOr<engine::Scheduler::Scheduled> again =
        scheduler_->ScheduleRound(ledger_->Of(channel), effective);
    if (!again.ok()) {
      // Every live ring was aborted: their losses are queued, and the
      // last of them ends the session.
      if (failure_.failed()) return FinalStatus();
    } else {
      losses_.AddResent(again->pages);
    }
  }
  ledger_->Clear(channel);
  // The destination now waits for one more SYNC of the round from each
  // live channel (none comes after FINISH: no round follows).
  if (!finishing_) {
    for (size_t i = 0; i < channels_.size(); ++i) {
      if (losses_.lost(i)) continue;
      if (uint32_t seq =
              channels_[i]->ring().PushBarrier(CommandType::kSync, effective);
          seq != 0) {
        last_seq_[i] = seq;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ramferry
