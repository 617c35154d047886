#include "engine/round_barrier.h"

#include "absl/strings/str_format.h"

namespace ramferry::engine {

RoundBarrier::RoundBarrier(
    uint32_t parties,
    std::function<absl::Status(uint64_t, uint64_t)> on_round_done)
    : parties_(parties), on_round_done_(std::move(on_round_done)) {}

absl::Status RoundBarrier::Arrive(uint64_t round, uint64_t pages) {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) return absl::AbortedError("session ended");
  if (round != completed_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SYNC for round %d while the destination is in round %d", round,
        completed_));
  }
  pages_ += pages;
  if (++arrived_ == parties_) {
    // Runs under the lock: the parked channels must not resume before the
    // round is confirmed (or the confirmation failed).
    absl::Status s = on_round_done_(round, pages_);
    if (!s.ok()) {
      aborted_ = true;
      released_.notify_all();
      return s;
    }
    arrived_ = 0;
    pages_ = 0;
    ++completed_;
    released_.notify_all();
    return absl::OkStatus();
  }
  while (!aborted_ && completed_ <= round) released_.wait(lock);
  if (completed_ <= round) return absl::AbortedError("session ended");
  return absl::OkStatus();
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

}  // namespace ramferry::engine
