// A token bucket shared by every channel of a session: the most bytes per
// second the session puts on the wire together (SessionOptions::
// max_bandwidth), so a migration leaves the rest of a link to the
// workload's own traffic, as QEMU's max-bandwidth does.
//
// Invariant: over any interval of length T, Acquire admits at most
// rate * T + burst bytes (a single request larger than the burst is
// admitted alone, after the wait its size earns). The rate may change at
// any time; a change applies to requests made after it.
#ifndef RAMFERRY_ENGINE_RATE_LIMITER_H_
#define RAMFERRY_ENGINE_RATE_LIMITER_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace ramferry::engine {

// The pure arithmetic of the bucket (generic cell rate algorithm): a
// theoretical arrival time that advances by bytes / rate per request.
// Not thread-safe; RateLimiter guards it.
class TokenBucket {
 public:
  // `bytes_per_second` 0: unlimited.
  TokenBucket(uint64_t bytes_per_second, absl::Duration burst)
      : rate_(bytes_per_second), burst_(burst) {}

  void SetRate(uint64_t bytes_per_second) { rate_ = bytes_per_second; }
  uint64_t rate() const { return rate_; }

  // Books `bytes` at `now` and returns how long the caller must wait
  // before sending them (zero: at once).
  absl::Duration Reserve(uint64_t bytes, absl::Time now);

 private:
  uint64_t rate_;
  absl::Duration burst_;
  // When the bytes booked so far would have left at exactly the rate.
  absl::Time busy_until_ = absl::InfinitePast();
};

class RateLimiter {
 public:
  // Bursts of this much time at the rate go without waiting: long enough
  // that a channel's packet (up to 4 MiB) rarely sleeps twice, short
  // enough that the rate holds over a tenth of a second.
  static constexpr absl::Duration kBurst = absl::Milliseconds(20);

  explicit RateLimiter(uint64_t bytes_per_second)
      : bucket_(bytes_per_second, kBurst) {}

  // Waits until `bytes` may go. An error once Abort() was called (the
  // session is ending), so no channel sleeps through a failure.
  absl::Status Acquire(uint64_t bytes);
  // 0: unlimited. Safe from any thread, while channels send.
  void SetRate(uint64_t bytes_per_second);
  uint64_t rate() const;
  void Abort();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  TokenBucket bucket_;    // guarded by mu_
  bool aborted_ = false;  // guarded by mu_
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_RATE_LIMITER_H_
