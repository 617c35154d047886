// RateLimiter: the bucket's arithmetic on a synthetic clock, then the
// shared limiter with real threads (lower bounds only: a slow machine
// can only make a limited transfer slower).
#include "engine/rate_limiter.h"

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::engine {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(TokenBucket, UnlimitedNeverWaits) {
  TokenBucket b(0, absl::Milliseconds(20));
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(b.Reserve(1 << 30, kT0), absl::ZeroDuration());
  }
}

TEST(TokenBucket, ABurstGoesAtOnceThenTheRateHolds) {
  // 1 MB/s with a 20 ms burst: 20 kB go at once.
  TokenBucket b(1'000'000, absl::Milliseconds(20));
  EXPECT_EQ(b.Reserve(10'000, kT0), absl::ZeroDuration());
  EXPECT_EQ(b.Reserve(10'000, kT0), absl::ZeroDuration());
  // Beyond the burst each byte waits its share of the second.
  EXPECT_EQ(b.Reserve(10'000, kT0), absl::Milliseconds(10));
  EXPECT_EQ(b.Reserve(10'000, kT0), absl::Milliseconds(20));
}

TEST(TokenBucket, OverAnyIntervalAtMostRateTimesItPlusTheBurst) {
  // Requests of odd sizes at odd times, each sent when its wait ends:
  // every window's bytes stay within rate * window + burst (+ one
  // request, which is admitted whole).
  const uint64_t rate = 5'000'000;
  const absl::Duration burst = absl::Milliseconds(20);
  TokenBucket b(rate, burst);
  std::vector<std::pair<absl::Time, uint64_t>> sent;
  absl::Time now = kT0;
  uint64_t size = 1;
  for (int i = 0; i < 2000; ++i) {
    size = (size * 7919 + 13) % 200'000 + 1;
    now += absl::Microseconds((size * 31) % 3000);
    const absl::Time at = now + b.Reserve(size, now);
    sent.push_back({at, size});
  }
  for (size_t i = 0; i < sent.size(); i += 37) {
    uint64_t bytes = 0;
    for (size_t j = i; j < sent.size(); ++j) {
      const absl::Duration window = sent[j].first - sent[i].first;
      bytes += sent[j].second;
      const double allowed = absl::ToDoubleSeconds(window + burst) * rate;
      ASSERT_LE(static_cast<double>(bytes), allowed + 200'000 + 1)
          << "window from request " << i << " to " << j;
    }
  }
}

TEST(TokenBucket, IdleTimeEarnsOneBurstAtMost) {
  TokenBucket b(1'000'000, absl::Milliseconds(20));
  EXPECT_EQ(b.Reserve(20'000, kT0), absl::ZeroDuration());
  // An hour idle still allows only 20 kB at once.
  const absl::Time later = kT0 + absl::Hours(1);
  EXPECT_EQ(b.Reserve(20'000, later), absl::ZeroDuration());
  EXPECT_EQ(b.Reserve(1'000, later), absl::Milliseconds(1));
}

TEST(TokenBucket, ARateChangeRetimesTheBytesNotYetDue) {
  // 1000 bytes booked at 1 MB/s are due in 1 ms; at 100 kB/s from the
  // same instant they are due in 10 ms, and the next 1000 after them.
  TokenBucket b(1'000'000, absl::ZeroDuration());
  const TokenBucket::Ticket first = b.Book(1'000, kT0);
  EXPECT_EQ(b.WaitFor(first, kT0), absl::Milliseconds(1));
  b.SetRate(100'000, kT0);
  EXPECT_EQ(b.WaitFor(first, kT0), absl::Milliseconds(10));
  EXPECT_EQ(b.Reserve(1'000, kT0), absl::Milliseconds(20));
  b.SetRate(0, kT0);
  EXPECT_EQ(b.WaitFor(first, kT0), absl::ZeroDuration());
  EXPECT_EQ(b.Reserve(1 << 30, kT0), absl::ZeroDuration());
}

TEST(TokenBucket, ARateChangeMidWaitKeepsWhatWasAlreadyDue) {
  // 1 MB booked at 1 kB/s (due in 1000 s); after 1 s at that rate 1000
  // bytes are due, and the rest goes at 1 MB/s: 999 ms more, not 999 s.
  TokenBucket b(1'000, absl::ZeroDuration());
  const TokenBucket::Ticket t = b.Book(1'000'000, kT0);
  EXPECT_EQ(b.WaitFor(t, kT0), absl::Seconds(1000));
  const absl::Time later = kT0 + absl::Seconds(1);
  b.SetRate(1'000'000, later);
  EXPECT_EQ(b.WaitFor(t, later), absl::Milliseconds(999));
  EXPECT_EQ(b.WaitFor(t, later + absl::Milliseconds(999)),
            absl::ZeroDuration());
}

TEST(TokenBucket, FromUnlimitedTheRateStartsAfterWhatWasBooked) {
  TokenBucket b(0, absl::ZeroDuration());
  EXPECT_EQ(b.Reserve(1 << 30, kT0), absl::ZeroDuration());
  b.SetRate(1'000'000, kT0);
  EXPECT_EQ(b.Reserve(1'000, kT0), absl::Milliseconds(1));
}

TEST(RateLimiter, ThreadsTogetherKeepToTheRate) {
  // 4 threads x 25 x 8 kB = 800 kB at 4 MB/s: at least 0.2 s less the
  // burst, however fast the machine.
  RateLimiter limiter(4'000'000);
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) ASSERT_OK(limiter.Acquire(8192));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(absl::Now() - start,
            absl::Milliseconds(800 * 1024 / 4000) - RateLimiter::kBurst);
}

TEST(RateLimiter, AbortWakesAWaiterWithAnError) {
  RateLimiter limiter(1000);  // 1 kB/s: a 1 MB request would wait ~17 min
  ASSERT_OK(limiter.Acquire(20));
  std::atomic<bool> done{false};
  absl::Status result;
  std::thread waiter([&] {
    result = limiter.Acquire(1 << 20);
    done = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(done.load());
  limiter.Abort();
  waiter.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(limiter.Acquire(1).code(), absl::StatusCode::kCancelled);
}

// Starts a waiter on `limiter` for `bytes`, applies `change`, and
// expects the waiter through within `bound` (a bound against a hang, not
// a measurement). A waiter still asleep then is released by Abort so
// the test fails instead of hanging for the old rate's wait.
void ExpectWaiterReleasedAfter(RateLimiter& limiter, uint64_t bytes,
                               const std::function<void()>& change,
                               absl::Duration bound) {
  absl::Notification done;
  absl::Status result;
  std::thread waiter([&] {
    result = limiter.Acquire(bytes);
    done.Notify();
  });
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_FALSE(done.HasBeenNotified()) << "the waiter did not wait";
  change();
  const bool through = done.WaitForNotificationWithTimeout(bound);
  if (!through) limiter.Abort();
  waiter.join();
  EXPECT_TRUE(through) << "still waiting " << bound
                       << " after the rate changed";
  EXPECT_OK(result);
}

TEST(RateLimiter, LiftingTheRateWakesAWaiterAtOnce) {
  // 1 kB/s: the 1 MB request would sleep about 17 minutes.
  RateLimiter limiter(1000);
  ASSERT_OK(limiter.Acquire(20));
  ExpectWaiterReleasedAfter(
      limiter, 1 << 20, [&] { limiter.SetRate(0); }, absl::Seconds(5));
}

TEST(RateLimiter, ALargerRateRetimesAWaiter) {
  // 1 MB at 1 kB/s, then 1 GB/s: about a millisecond left.
  RateLimiter limiter(1000);
  ASSERT_OK(limiter.Acquire(20));
  ExpectWaiterReleasedAfter(
      limiter, 1 << 20, [&] { limiter.SetRate(1'000'000'000); },
      absl::Seconds(5));
  // And the bucket is not left booked minutes ahead.
  const absl::Time start = absl::Now();
  ASSERT_OK(limiter.Acquire(1 << 20));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(RateLimiter, LiftingTheRateLetsLaterRequestsThrough) {
  RateLimiter limiter(1000);
  ASSERT_OK(limiter.Acquire(20));
  limiter.SetRate(0);
  const absl::Time start = absl::Now();
  EXPECT_OK(limiter.Acquire(1 << 30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(limiter.rate(), 0u);
}

}  // namespace
}  // namespace ramferry::engine
