// RateLimiter: the bucket's arithmetic on a synthetic clock, then the
// shared limiter with real threads (lower bounds only: a slow machine
// can only make a limited transfer slower).
#include "engine/rate_limiter.h"

#include <atomic>
#include <thread>
#include <vector>

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

TEST(TokenBucket, ARateChangeAppliesToLaterRequests) {
  TokenBucket b(1'000'000, absl::ZeroDuration());
  EXPECT_EQ(b.Reserve(1'000, kT0), absl::Milliseconds(1));
  b.SetRate(100'000);
  EXPECT_EQ(b.Reserve(1'000, kT0), absl::Milliseconds(11));
  b.SetRate(0);
  EXPECT_EQ(b.Reserve(1 << 30, kT0), absl::ZeroDuration());
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
