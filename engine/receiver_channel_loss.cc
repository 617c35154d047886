// Surviving channel loss on the destination side: a receive thread that
// lost its connection reports the loss to the source, which declares the
// channel gone (CHANNEL_GONE) before the round may go on without it.
#include <algorithm>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_util.h"
#include "engine/receiver_impl.h"
#include "proto/control.h"

namespace ramferry {

using base::Annotate;
using engine::ChannelReceiver;

ChannelLoss* ReceiverImpl::FindLossLocked(uint32_t channel) {
  for (ChannelLoss& l : losses_) {
    if (l.channel == channel) return &l;
  }
  return nullptr;
}

bool ReceiverImpl::ChannelGone(uint32_t channel) {
  std::lock_guard<std::mutex> lock(loss_mu_);
  return channel_state_[channel] != ChannelState::kLive;
}

bool ReceiverImpl::ChannelRemoved(uint32_t channel) {
  std::lock_guard<std::mutex> lock(loss_mu_);
  return channel_state_[channel] == ChannelState::kRemoving ||
         channel_state_[channel] == ChannelState::kRemoved;
}

void ReceiverImpl::OnChannelError(const ChannelReceiver::Error& e) {
  // The source declared it gone, and RemoveChannel is stopping it: what
  // the stop returns (a read cut short, CANCELLED from a SYNC parked at
  // the barrier) is the removal, not a failure of the session.
  if (ChannelRemoved(e.channel)) return;
  // Invalid data is not a lost link, and once the session failed this is
  // the teardown's echo.
  if (!e.connection_failed || failure_.failed()) {
    failure_.Fail(e.status);
    return;
  }
  absl::Status all_lost;
  {
    // Held while reporting, so AwaitFinished cannot acknowledge FINISH
    // between the state change and the report: the source hears of every
    // loss it has to count.
    std::lock_guard<std::mutex> lock(loss_mu_);
    // Already reported, or removed since the check above.
    if (channel_state_[e.channel] != ChannelState::kLive) return;
    channel_state_[e.channel] = ChannelState::kLostHere;
    losses_.push_back({e.channel, e.round, std::string(e.status.message())});
    if (std::count(channel_state_.begin(), channel_state_.end(),
                   ChannelState::kLive) == 0) {
      all_lost = absl::UnavailableError(
          absl::StrFormat("all %d channels lost: %s", channel_state_.size(),
                          DescribeChannelLosses(losses_)));
    } else {
      // The round barrier keeps waiting for the channel until the source,
      // told of it here, declares it gone (RemoveChannel).
      proto::ChannelLoss lost;
      lost.channel = e.channel;
      lost.round = e.round;
      lost.code = static_cast<uint16_t>(e.status.code());
      lost.text = std::string(e.status.message());
      if (absl::Status s = control_->Send(proto::EncodeChannelLost(lost));
          !s.ok()) {
        all_lost = Annotate(s, "reporting a lost channel");
      }
    }
  }
  if (!all_lost.ok()) failure_.Fail(all_lost);
}

absl::Status ReceiverImpl::RemoveChannel(absl::Span<const uint8_t> payload) {
  if (!surviving_) {
    return absl::InvalidArgumentError(
        "unexpected CHANNEL_GONE: this session does not survive channel loss");
  }
  absl::StatusOr<proto::ChannelLoss> gone =
      proto::DecodeChannelLoss(proto::ControlType::kChannelGone, payload);
  if (!gone.ok()) return gone.status();
  const uint32_t c = gone->channel;
  if (c >= channels_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CHANNEL_GONE for channel %d of %d", c, channels_.size()));
  }
  {
    std::lock_guard<std::mutex> lock(loss_mu_);
    if (channel_state_[c] == ChannelState::kRemoving ||
        channel_state_[c] == ChannelState::kRemoved) {
      return absl::InvalidArgumentError(
          absl::StrFormat("channel %d declared gone twice", c));
    }
    channel_state_[c] = ChannelState::kRemoving;
    const std::string why =
        absl::StrCat("source: ", proto::ChannelLossStatus(*gone).message());
    ChannelLoss* known = FindLossLocked(c);
    if (known == nullptr) {
      losses_.push_back({c, gone->round, why});
    } else {
      known->reason = absl::StrCat("here: ", known->reason, "; ", why);
    }
  }
  // The receive thread stops before the round may go on without it: once
  // joined, nothing more of this channel lands in memory, so no stale copy
  // can overwrite a page the round re-sends, nor a later round's.
  ChannelReceiver& channel = *channels_[c];
  channel.transport().Shutdown();  // a blocked read returns
  barrier_->Detach(c);             // a parked SYNC returns
  channel.Join();
  absl::StatusOr<uint64_t> effective = barrier_->RemoveParty(c, gone->round);
  if (!effective.ok()) {
    // The session ended meanwhile (the barrier was aborted): its cause is
    // the one to report.
    if (failure_.failed()) return failure_.status();
    return Annotate(effective.status(), "CHANNEL_GONE");
  }
  {
    std::lock_guard<std::mutex> lock(loss_mu_);
    channel_state_[c] = ChannelState::kRemoved;
    // The round the session went on without it, as the source reports it.
    FindLossLocked(c)->round = *effective;
  }
  return control_->Send(proto::EncodeChannelGoneAck({c, *effective}));
}

}  // namespace ramferry
