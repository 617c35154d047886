#include "engine/rate_limiter.h"

#include <algorithm>
#include <chrono>

#include "absl/time/clock.h"

namespace ramferry::engine {

absl::Duration TokenBucket::Reserve(uint64_t bytes, absl::Time now) {
  if (rate_ == 0) return absl::ZeroDuration();
  // Idle time earns at most one burst of credit.
  busy_until_ = std::max(busy_until_, now - burst_);
  busy_until_ +=
      absl::Seconds(static_cast<double>(bytes) / static_cast<double>(rate_));
  return std::max(absl::ZeroDuration(), busy_until_ - now);
}

absl::Status RateLimiter::Acquire(uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) return absl::CancelledError("the session is ending");
  const absl::Duration wait = bucket_.Reserve(bytes, absl::Now());
  if (wait == absl::ZeroDuration()) return absl::OkStatus();
  const auto until =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(wait);
  cv_.wait_until(lock, until, [this] { return aborted_; });
  if (aborted_) return absl::CancelledError("the session is ending");
  return absl::OkStatus();
}

void RateLimiter::SetRate(uint64_t bytes_per_second) {
  std::lock_guard<std::mutex> lock(mu_);
  bucket_.SetRate(bytes_per_second);
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
