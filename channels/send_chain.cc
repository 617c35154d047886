#include "channels/send_chain.h"

#include <errno.h>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/status_macros.h"

namespace ramferry::channels {

SendChain::SendChain(HeaderSlots* slots, TransportStats* stats,
                     size_t max_chain)
    : slots_(slots), stats_(stats), max_chain_(max_chain) {}

void SendChain::Queue(Send send) {
  send.token = next_token_++;
  slots_->Attach(send.token, send.slot);
  queued_.push_back(send);
}

absl::Span<const SendChain::Send> SendChain::Start() {
  chain_.clear();
  started_.clear();
  if (starved_) return started_;  // nothing goes before room is freed
  while (!queued_.empty() && chain_.size() < max_chain_) {
    chain_.push_back({queued_.front()});
    started_.push_back(queued_.front());
    queued_.pop_front();
  }
  pending_ = chain_.size();
  return started_;
}

uint64_t SendChain::UserData(size_t i) const {
  // The chain position for the send completion; the token for the
  // notification, which carries the same tag.
  return (uint64_t{i} << 32) | chain_[i].send.token;
}

absl::Status SendChain::OnCompletion(uint64_t user_data, int32_t result,
                                     bool notification_follows) {
  const uint64_t index = user_data >> 32;
  const uint32_t token = TokenOf(user_data);
  if (index >= chain_.size() || chain_[index].send.token != token ||
      chain_[index].completed) {
    return absl::InternalError(absl::StrFormat(
        "completion for send %d (position %d), which is not in flight", token,
        index));
  }
  InFlight& f = chain_[index];
  f.completed = true;
  --pending_;
  if (result >= 0) {
    f.delivered = static_cast<uint64_t>(result);
    if (f.send.offset + f.delivered < f.send.total) stats_->short_sends.Add();
  } else if (result == -ENOBUFS) {
    stats_->enobufs_retries.Add();  // again once notifications free room
    starved_ = true;
  } else if (result != -ECANCELED && result != -EAGAIN && result != -EINTR) {
    return base::ErrnoStatus(-result, "send");
  }
  if (!notification_follows) {
    // Nothing pinned, or nothing more will be said: the slot is free of it.
    RAMFERRY_RETURN_IF_ERROR(
        slots_->Complete(token, false, /*zero_copy=*/false));
  }
  if (pending_ == 0) RequeueUnfinished();
  return absl::OkStatus();
}

void SendChain::RequeueUnfinished() {
  std::vector<Send> again;
  for (const InFlight& f : chain_) {
    Send s = f.send;
    s.offset += f.delivered;
    if (s.offset < s.total) again.push_back(s);
  }
  chain_.clear();
  // Ahead of everything queued since, in order, each under a fresh token
  // (the old tokens complete through their own completions).
  queued_.insert(queued_.begin(), again.begin(), again.end());
  for (size_t i = 0; i < again.size(); ++i) {
    queued_[i].token = next_token_++;
    slots_->Attach(queued_[i].token, queued_[i].slot);
  }
}

}  // namespace ramferry::channels
