#include "engine/round_barrier.h"

#include <vector>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace ramferry::engine {

namespace {

std::vector<uint32_t> FirstChannels(uint32_t n) {
  std::vector<uint32_t> channels(n);
  for (uint32_t i = 0; i < n; ++i) channels[i] = i;
  return channels;
}

absl::Status UnknownParty(uint32_t party) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "channel %d is not one the round barrier waits for", party));
}

}  // namespace

RoundBarrier::RoundBarrier(
    uint32_t parties,
    std::function<absl::Status(uint64_t, uint64_t)> on_round_done)
    : RoundBarrier(FirstChannels(parties), std::move(on_round_done)) {}

RoundBarrier::RoundBarrier(
    absl::Span<const uint32_t> channels,
    std::function<absl::Status(uint64_t, uint64_t)> on_round_done)
    : on_round_done_(std::move(on_round_done)) {
  for (uint32_t c : channels) parties_[c];
  remaining_ = static_cast<uint32_t>(parties_.size());
}

RoundBarrier::Party* RoundBarrier::Find(uint32_t party) {
  auto it = parties_.find(party);
  return it == parties_.end() ? nullptr : &it->second;
}

absl::Status RoundBarrier::Advance() {
  if (generation_ == generations_) {
    uint64_t pages = 0;
    for (const auto& [channel, p] : parties_) {
      if (!p.removed) pages += p.pages;
    }
    // Runs under the lock: the parked channels must not resume before the
    // round is confirmed (or the confirmation failed).
    absl::Status s = on_round_done_(completed_, pages);
    if (!s.ok()) {
      aborted_ = true;
      released_.notify_all();
      return s;
    }
    for (auto& [channel, p] : parties_) p.pages = 0;
    ++completed_;
    generation_ = 1;
    generations_ = 1;
  } else {
    ++generation_;
  }
  for (auto& [channel, p] : parties_) p.arrived = false;
  arrived_ = 0;
  ++releases_;
  released_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<bool> RoundBarrier::Arrive(uint32_t party, uint64_t round,
                                          uint64_t pages) {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) return absl::AbortedError("session ended");
  Party* found = Find(party);
  if (found == nullptr) return UnknownParty(party);
  Party& me = *found;
  if (me.detached || me.removed) {
    return absl::CancelledError("the channel was declared gone");
  }
  if (round != completed_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SYNC for round %d while the destination is in round %d", round,
        completed_));
  }
  me.pages += pages;
  me.arrived = true;
  const uint64_t releases = releases_;
  if (++arrived_ == remaining_) {
    RAMFERRY_RETURN_IF_ERROR(Advance());
    return completed_ > round;
  }
  while (!aborted_ && !me.detached && releases_ == releases) {
    released_.wait(lock);
  }
  if (releases_ != releases) return completed_ > round;
  if (me.detached) return absl::CancelledError("the channel was declared gone");
  return absl::AbortedError("session ended");
}

void RoundBarrier::Detach(uint32_t party) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Party* p = Find(party); p != nullptr) p->detached = true;
  released_.notify_all();
}

absl::StatusOr<uint64_t> RoundBarrier::RemoveParty(uint32_t party,
                                                   uint64_t declared_round) {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) return absl::AbortedError("session ended");
  Party* found = Find(party);
  if (found == nullptr) return UnknownParty(party);
  Party& gone = *found;
  if (gone.removed) {
    return absl::InvalidArgumentError(
        absl::StrFormat("channel %d was declared gone twice", party));
  }
  // The source has at most one round unconfirmed, and declares the oldest
  // one it has not seen confirmed: this round, or the one just completed
  // whose confirmation was still on its way.
  if (declared_round != completed_ && declared_round + 1 != completed_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "channel %d declared gone as of round %d while the destination is in "
        "round %d",
        party, declared_round, completed_));
  }
  gone.removed = true;
  gone.detached = true;
  gone.pages = 0;
  if (gone.arrived) {
    gone.arrived = false;
    --arrived_;
  }
  --remaining_;
  ++generations_;
  released_.notify_all();
  // Those already parked in this generation go on to the next one (the
  // round cannot complete here: it now needs one more generation).
  if (remaining_ > 0 && arrived_ == remaining_) {
    RAMFERRY_RETURN_IF_ERROR(Advance());
  }
  return completed_;
}

void RoundBarrier::Abort() {
  std::unique_lock<std::mutex> lock(mu_);
  aborted_ = true;
  released_.notify_all();
}

uint64_t RoundBarrier::completed_rounds() const {
  std::unique_lock<std::mutex> lock(mu_);
  return completed_;
}

uint32_t RoundBarrier::remaining() const {
  std::unique_lock<std::mutex> lock(mu_);
  return remaining_;
}

}  // namespace ramferry::engine
