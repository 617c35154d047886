// A token bucket shared by every channel of a session: the most bytes per
// second the session puts on the wire together (SessionOptions::
// max_bandwidth), so a migration leaves the rest of a link to the
// workload's own traffic, as QEMU's max-bandwidth does.
//
// Invariant: over any interval of length T, Acquire admits at most
// rate * T + burst bytes (a single request larger than the burst is
// admitted alone, after the wait its size earns). The rate may change at
// any time, and a change applies at once to every byte not yet due,
// including those of requests already waiting: a tiny rate followed by
// a large one (or by 0, unlimited) never leaves a channel asleep on the
// tiny rate's deadline.
#ifndef RAMFERRY_ENGINE_RATE_LIMITER_H_
#define RAMFERRY_ENGINE_RATE_LIMITER_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace ramferry::engine {

// The pure arithmetic of the bucket on a byte clock: the bytes booked
// so far, and the bytes the rate has let go by a given time; a booking
// is due when the second reaches its end. A rate change re-anchors the
// second at the change, so what was due stays due and the rest goes at
// the new rate. Not thread-safe; RateLimiter guards it.
class TokenBucket {
 public:
  // A booking's end on the byte clock.
  using Ticket = double;

  // `bytes_per_second` 0: unlimited.
  TokenBucket(uint64_t bytes_per_second, absl::Duration burst)
      : rate_(bytes_per_second), burst_(burst) {}

  // From `now` on, bytes go at `bytes_per_second` (0: unlimited), those
  // booked before included.
  void SetRate(uint64_t bytes_per_second, absl::Time now);
  uint64_t rate() const { return rate_; }

  // Books `bytes` at `now`.
  Ticket Book(uint64_t bytes, absl::Time now);
  // How long a booking still waits at `now` (zero: it may go).
  absl::Duration WaitFor(Ticket ticket, absl::Time now) const;
  // Book, and the wait at `now`.
  absl::Duration Reserve(uint64_t bytes, absl::Time now) {
    return WaitFor(Book(bytes, now), now);
  }

 private:
  // Bytes let go by `now` at the current rate (infinite when unlimited).
  double Released(absl::Time now) const;

  uint64_t rate_;
  absl::Duration burst_;
  // Bytes booked since the bucket was made.
  double booked_ = 0;
  // Released(anchor_time_) == anchor_bytes_; the rate runs from there.
  // Unset until the first use, which starts one burst of credit.
  absl::Time anchor_time_ = absl::InfinitePast();
  double anchor_bytes_ = 0;
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
  // Counts rate changes, so a sleeper knows to compute its wait again.
  uint64_t rate_changes_ = 0;  // guarded by mu_
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_RATE_LIMITER_H_
