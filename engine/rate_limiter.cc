#include "engine/rate_limiter.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "absl/time/clock.h"

namespace ramferry::engine {

double TokenBucket::Released(absl::Time now) const {
  if (rate_ == 0) return std::numeric_limits<double>::infinity();
  return anchor_bytes_ +
         absl::ToDoubleSeconds(now - anchor_time_) * static_cast<double>(rate_);
}

void TokenBucket::SetRate(uint64_t bytes_per_second, absl::Time now) {
  if (anchor_time_ != absl::InfinitePast()) {
    // Unlimited until now: everything booked has gone.
    anchor_bytes_ = rate_ == 0 ? booked_ : Released(now);
    anchor_time_ = now;
  }
  rate_ = bytes_per_second;
}

TokenBucket::Ticket TokenBucket::Book(uint64_t bytes, absl::Time now) {
  if (anchor_time_ == absl::InfinitePast()) {
    // The first booking starts with one burst of credit.
    anchor_time_ = now - burst_;
    anchor_bytes_ = 0;
  }
  if (rate_ != 0) {
    // Idle time earns at most one burst of credit.
    booked_ = std::max(booked_, Released(now) - absl::ToDoubleSeconds(burst_) *
                                                    static_cast<double>(rate_));
  }
  booked_ += static_cast<double>(bytes);
  return booked_;
}

absl::Duration TokenBucket::WaitFor(Ticket ticket, absl::Time now) const {
  const double ahead = ticket - Released(now);
  if (!(ahead > 0)) return absl::ZeroDuration();
  return absl::Seconds(ahead / static_cast<double>(rate_));
}

absl::Status RateLimiter::Acquire(uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) return absl::CancelledError("the session is ending");
  const TokenBucket::Ticket ticket = bucket_.Book(bytes, absl::Now());
  for (;;) {
    const absl::Duration wait = bucket_.WaitFor(ticket, absl::Now());
    if (wait == absl::ZeroDuration()) return absl::OkStatus();
    const auto until =
        std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(wait);
    const uint64_t changes = rate_changes_;
    cv_.wait_until(lock, until,
                   [&] { return aborted_ || rate_changes_ != changes; });
    if (aborted_) return absl::CancelledError("the session is ending");
  }
}

void RateLimiter::SetRate(uint64_t bytes_per_second) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    bucket_.SetRate(bytes_per_second, absl::Now());
    ++rate_changes_;
  }
  cv_.notify_all();
}

uint64_t RateLimiter::rate() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bucket_.rate();
}

void RateLimiter::Abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
  }
  cv_.notify_all();
}

}  // namespace ramferry::engine
