// RoundBarrier: the destination's per-round rendezvous of all channels.
#include "engine/round_barrier.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ramferry::engine {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr absl::Duration kStillBlocked = absl::Milliseconds(50);

// Records every callback invocation. std::mutex rather than absl::Mutex:
// TSan sees pthread mutexes (see the note at the top of this file).
struct Recorder {
  std::mutex mu;
  std::vector<std::pair<uint64_t, uint64_t>> calls;  // (round, pages)
  absl::Status result;  // what the callback returns
  std::function<absl::Status(uint64_t, uint64_t)> Fn() {
    return [this](uint64_t round, uint64_t pages) {
      std::lock_guard<std::mutex> lock(mu);
      calls.emplace_back(round, pages);
      return result;
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return calls.size();
  }
};

TEST(RoundBarrierTest, AllReturnAfterLastArrivesCallbackOnce) {
  constexpr int kParties = 4;
  Recorder rec;
  RoundBarrier barrier(kParties, rec.Fn());
  std::atomic<int> arriving{0};
  std::atomic<int> early{0}, callback_missing{0};
  std::vector<absl::Status> results(kParties);
  std::vector<std::thread> threads;
  for (int i = 0; i < kParties; ++i) {
    threads.emplace_back([&, i] {
      arriving.fetch_add(1);
      results[i] = barrier.Arrive(0, i + 1);
      // Nobody leaves before everyone came, nor before the callback ran.
      if (arriving.load() != kParties) early.fetch_add(1);
      if (rec.count() != 1) callback_missing.fetch_add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kParties; ++i) EXPECT_TRUE(results[i].ok()) << results[i];
  EXPECT_EQ(early.load(), 0);
  EXPECT_EQ(callback_missing.load(), 0);
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0].first, 0u);
  EXPECT_EQ(rec.calls[0].second, 1u + 2 + 3 + 4);
  EXPECT_EQ(barrier.completed_rounds(), 1u);
}

TEST(RoundBarrierTest, ParkedChannelWaitsForTheOthers) {
  Recorder rec;
  RoundBarrier barrier(2, rec.Fn());
  absl::Notification returned;
  absl::Status first;
  std::thread t([&] {
    first = barrier.Arrive(0, 5);
    returned.Notify();
  });
  EXPECT_FALSE(returned.WaitForNotificationWithTimeout(kStillBlocked));
  EXPECT_EQ(rec.count(), 0u);
  EXPECT_EQ(barrier.completed_rounds(), 0u);
  EXPECT_TRUE(barrier.Arrive(0, 7).ok());
  t.join();
  EXPECT_TRUE(first.ok()) << first;
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0].second, 12u);
}

TEST(RoundBarrierTest, ManyRoundsSumsResetPerRound) {
  constexpr int kParties = 3, kRounds = 200;
  Recorder rec;
  RoundBarrier barrier(kParties, rec.Fn());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < kParties; ++i) {
    threads.emplace_back([&, i] {
      for (uint64_t r = 0; r < kRounds; ++r) {
        if (!barrier.Arrive(r, r * 10 + i).ok()) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(rec.calls.size(), static_cast<size_t>(kRounds));
  for (uint64_t r = 0; r < kRounds; ++r) {
    EXPECT_EQ(rec.calls[r].first, r);
    EXPECT_EQ(rec.calls[r].second, 3 * r * 10 + 0 + 1 + 2) << r;
  }
  EXPECT_EQ(barrier.completed_rounds(), static_cast<uint64_t>(kRounds));
}

TEST(RoundBarrierTest, SinglePartyReturnsImmediately) {
  Recorder rec;
  RoundBarrier barrier(1, rec.Fn());
  EXPECT_TRUE(barrier.Arrive(0, 3).ok());
  EXPECT_TRUE(barrier.Arrive(1, 4).ok());
  ASSERT_EQ(rec.calls.size(), 2u);
  EXPECT_EQ(rec.calls[1], std::make_pair(uint64_t{1}, uint64_t{4}));
}

TEST(RoundBarrierTest, WrongRoundIsInvalidArgument) {
  Recorder rec;
  RoundBarrier barrier(1, rec.Fn());
  absl::Status s = barrier.Arrive(1, 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("round 1"), HasSubstr("round 0")));
  EXPECT_EQ(rec.count(), 0u);
  // Not counted as an arrival, and its pages are not added.
  ASSERT_TRUE(barrier.Arrive(0, 2).ok());
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0].second, 2u);
  // A round already done is wrong too.
  s = barrier.Arrive(0, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("round 0"), HasSubstr("round 1")));
}

TEST(RoundBarrierTest, CallbackErrorAbortsEveryWaiter) {
  constexpr int kParties = 3;
  Recorder rec;
  rec.result = absl::DataLossError("confirm failed");
  RoundBarrier barrier(kParties, rec.Fn());
  std::vector<absl::Status> results(kParties - 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < kParties - 1; ++i) {
    threads.emplace_back([&, i] { results[i] = barrier.Arrive(0, 1); });
  }
  // Which party arrives last (and runs the callback) is up to the
  // scheduler; all three run on threads.
  absl::Status last;
  threads.emplace_back([&] { last = barrier.Arrive(0, 1); });
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0].second, 3u);
  // Exactly one party (whichever came last) sees the callback's error; the
  // others were released with a non-OK status.
  std::vector<absl::Status> all = results;
  all.push_back(last);
  int data_loss = 0;
  for (const absl::Status& s : all) {
    EXPECT_FALSE(s.ok());
    if (s.code() == absl::StatusCode::kDataLoss) {
      ++data_loss;
      EXPECT_THAT(s.message(), HasSubstr("confirm failed"));
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    }
  }
  EXPECT_EQ(data_loss, 1);
  EXPECT_EQ(barrier.completed_rounds(), 0u);
  // The barrier stays aborted.
  EXPECT_EQ(barrier.Arrive(0, 1).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(barrier.Arrive(1, 1).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(rec.count(), 1u);
}

TEST(RoundBarrierTest, AbortWakesWaiters) {
  constexpr int kParties = 4;
  Recorder rec;
  RoundBarrier barrier(kParties, rec.Fn());
  std::vector<absl::Status> results(kParties - 1);
  std::atomic<int> done{0};
  absl::Notification all_done;
  std::vector<std::thread> threads;
  for (int i = 0; i < kParties - 1; ++i) {
    threads.emplace_back([&, i] {
      results[i] = barrier.Arrive(0, 1);
      if (done.fetch_add(1) + 1 == kParties - 1) all_done.Notify();
    });
  }
  EXPECT_FALSE(all_done.WaitForNotificationWithTimeout(kStillBlocked));
  EXPECT_EQ(done.load(), 0);
  barrier.Abort();
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  }
  EXPECT_EQ(rec.count(), 0u);
  EXPECT_EQ(barrier.Arrive(0, 1).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(rec.count(), 0u);
}

TEST(RoundBarrierTest, AbortAfterRoundKeepsCompletedCount) {
  Recorder rec;
  RoundBarrier barrier(1, rec.Fn());
  ASSERT_TRUE(barrier.Arrive(0, 1).ok());
  barrier.Abort();
  EXPECT_EQ(barrier.Arrive(1, 1).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(barrier.completed_rounds(), 1u);
}

}  // namespace
}  // namespace ramferry::engine
