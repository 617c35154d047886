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
#include "tests/support/status_matchers.h"

namespace ramferry::engine {
namespace {

using ::ramferry::testing::StatusIs;
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

// An arrival as a status: OK only when it completed the round (no party is
// ever removed in these tests, so no arrival may end short of that).
absl::Status Done(const absl::StatusOr<bool>& arrival) {
  if (!arrival.ok()) return arrival.status();
  if (!*arrival) return absl::InternalError("released before the round ended");
  return absl::OkStatus();
}

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
      results[i] = Done(barrier.Arrive(i, 0, i + 1));
      // Nobody leaves before everyone came, nor before the callback ran.
      if (arriving.load() != kParties) early.fetch_add(1);
      if (rec.count() != 1) callback_missing.fetch_add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kParties; ++i) EXPECT_OK(results[i]);
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
    first = Done(barrier.Arrive(0, 0, 5));
    returned.Notify();
  });
  EXPECT_FALSE(returned.WaitForNotificationWithTimeout(kStillBlocked));
  EXPECT_EQ(rec.count(), 0u);
  EXPECT_EQ(barrier.completed_rounds(), 0u);
  EXPECT_OK(Done(barrier.Arrive(1, 0, 7)));
  t.join();
  EXPECT_OK(first);
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
        if (!Done(barrier.Arrive(i, r, r * 10 + i)).ok()) failures.fetch_add(1);
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
  EXPECT_OK(Done(barrier.Arrive(0, 0, 3)));
  EXPECT_OK(Done(barrier.Arrive(0, 1, 4)));
  ASSERT_EQ(rec.calls.size(), 2u);
  EXPECT_EQ(rec.calls[1], std::make_pair(uint64_t{1}, uint64_t{4}));
}

TEST(RoundBarrierTest, WrongRoundIsInvalidArgument) {
  Recorder rec;
  RoundBarrier barrier(1, rec.Fn());
  absl::Status s = Done(barrier.Arrive(0, 1, 10));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("round 1"), HasSubstr("round 0")));
  EXPECT_EQ(rec.count(), 0u);
  // Not counted as an arrival, and its pages are not added.
  ASSERT_OK(Done(barrier.Arrive(0, 0, 2)));
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0].second, 2u);
  // A round already done is wrong too.
  s = Done(barrier.Arrive(0, 0, 1));
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
    threads.emplace_back(
        [&, i] { results[i] = Done(barrier.Arrive(i, 0, 1)); });
  }
  // Which party arrives last (and runs the callback) is up to the
  // scheduler; all three run on threads.
  absl::Status last;
  threads.emplace_back([&] { last = Done(barrier.Arrive(2, 0, 1)); });
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0].second, 3u);
  // Exactly one party (whichever came last) sees the callback's error; the
  // others were released with a non-OK status.
  std::vector<absl::Status> all = results;
  all.push_back(last);
  int data_loss = 0;
  for (const absl::Status& s : all) {
    if (s.code() == absl::StatusCode::kDataLoss) {
      ++data_loss;
      EXPECT_THAT(s, StatusIs(absl::StatusCode::kDataLoss,
                              HasSubstr("confirm failed")));
    } else {
      EXPECT_THAT(
          s, StatusIs(absl::StatusCode::kAborted, HasSubstr("session ended")));
    }
  }
  EXPECT_EQ(data_loss, 1);
  EXPECT_EQ(barrier.completed_rounds(), 0u);
  // The barrier stays aborted.
  EXPECT_EQ(Done(barrier.Arrive(0, 0, 1)).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Done(barrier.Arrive(0, 1, 1)).code(), absl::StatusCode::kAborted);
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
      results[i] = Done(barrier.Arrive(i, 0, 1));
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
  EXPECT_EQ(Done(barrier.Arrive(3, 0, 1)).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(rec.count(), 0u);
}

TEST(RoundBarrierTest, AbortAfterRoundKeepsCompletedCount) {
  Recorder rec;
  RoundBarrier barrier(1, rec.Fn());
  ASSERT_OK(Done(barrier.Arrive(0, 0, 1)));
  barrier.Abort();
  EXPECT_EQ(Done(barrier.Arrive(0, 1, 1)).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(barrier.completed_rounds(), 1u);
}

// ---- parties removed mid-session (a lost channel) ----

TEST(RoundBarrierTest, RemovalReleasesTheParkedForOneMoreSync) {
  Recorder rec;
  RoundBarrier barrier(3, rec.Fn());
  absl::StatusOr<bool> a0, a1;
  std::thread t0([&] { a0 = barrier.Arrive(0, 0, 10); });
  std::thread t1([&] { a1 = barrier.Arrive(1, 0, 20); });
  // Parked: party 2 has not arrived.
  absl::SleepFor(kStillBlocked);
  EXPECT_EQ(rec.count(), 0u);
  absl::StatusOr<uint64_t> effective = barrier.RemoveParty(2, 0);
  ASSERT_OK(effective);
  EXPECT_EQ(*effective, 0u);
  t0.join();
  t1.join();
  // Released within the round: the re-sent batches and one more SYNC come.
  ASSERT_OK(a0);
  ASSERT_OK(a1);
  EXPECT_FALSE(*a0);
  EXPECT_FALSE(*a1);
  EXPECT_EQ(rec.count(), 0u);
  EXPECT_EQ(barrier.remaining(), 2u);
  std::thread t2([&] { a0 = barrier.Arrive(0, 0, 5); });
  a1 = barrier.Arrive(1, 0, 7);
  t2.join();
  ASSERT_OK(a0);
  ASSERT_OK(a1);
  EXPECT_TRUE(*a0);
  EXPECT_TRUE(*a1);
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0],
            std::make_pair(uint64_t{0}, uint64_t{10 + 20 + 5 + 7}));
  // Later rounds need the survivors only, once each.
  std::thread t3([&] { a0 = barrier.Arrive(0, 1, 1); });
  a1 = barrier.Arrive(1, 1, 2);
  t3.join();
  ASSERT_OK(a0);
  ASSERT_OK(a1);
  EXPECT_TRUE(*a0 && *a1);
  ASSERT_EQ(rec.calls.size(), 2u);
  EXPECT_EQ(rec.calls[1], std::make_pair(uint64_t{1}, uint64_t{3}));
}

TEST(RoundBarrierTest, RemovedPartysPagesDoNotCountInItsRound) {
  Recorder rec;
  RoundBarrier barrier(3, rec.Fn());
  // Party 2 read its SYNC, then is declared gone: it is detached (its
  // thread stops), then removed; the source re-sends its pages elsewhere.
  absl::StatusOr<bool> a2;
  std::thread t2([&] { a2 = barrier.Arrive(2, 0, 100); });
  absl::SleepFor(kStillBlocked);
  barrier.Detach(2);
  t2.join();
  EXPECT_EQ(a2.status().code(), absl::StatusCode::kCancelled) << a2.status();
  absl::StatusOr<uint64_t> effective = barrier.RemoveParty(2, 0);
  ASSERT_OK(effective);
  EXPECT_EQ(*effective, 0u);
  absl::StatusOr<bool> a0;
  std::thread t0([&] {
    a0 = barrier.Arrive(0, 0, 1);                        // the original SYNC
    if (a0.ok() && !*a0) a0 = barrier.Arrive(0, 0, 50);  // the extra one
  });
  absl::StatusOr<bool> a1 = barrier.Arrive(1, 0, 2);
  ASSERT_OK(a1);
  if (!*a1) a1 = barrier.Arrive(1, 0, 50);
  t0.join();
  ASSERT_OK(a0);
  ASSERT_OK(a1);
  EXPECT_TRUE(*a0 && *a1);
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0].second, 1u + 2 + 50 + 50);
  // A detached party cannot arrive again.
  EXPECT_EQ(barrier.Arrive(2, 1, 1).status().code(),
            absl::StatusCode::kCancelled);
}

TEST(RoundBarrierTest, RemovalAfterItsRoundCompletedTakesEffectInTheNext) {
  Recorder rec;
  RoundBarrier barrier(2, rec.Fn());
  absl::StatusOr<bool> a1;
  std::thread t([&] { a1 = barrier.Arrive(1, 0, 4); });
  ASSERT_OK(Done(barrier.Arrive(0, 0, 3)));
  t.join();
  ASSERT_OK(Done(a1));
  // The source declared party 1 gone before it saw round 0 confirmed:
  // round 0 stands (party 1's SYNC came after all its pages).
  absl::StatusOr<uint64_t> effective = barrier.RemoveParty(1, 0);
  ASSERT_OK(effective);
  EXPECT_EQ(*effective, 1u);
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0], std::make_pair(uint64_t{0}, uint64_t{7}));
  // Round 1: the extra SYNC, then the round's own.
  absl::StatusOr<bool> a = barrier.Arrive(0, 1, 0);
  ASSERT_OK(a);
  EXPECT_FALSE(*a);
  a = barrier.Arrive(0, 1, 9);
  ASSERT_OK(a);
  EXPECT_TRUE(*a);
  ASSERT_EQ(rec.calls.size(), 2u);
  EXPECT_EQ(rec.calls[1], std::make_pair(uint64_t{1}, uint64_t{9}));
}

TEST(RoundBarrierTest, TwoRemovalsInOneRoundNeedTwoMoreSyncs) {
  Recorder rec;
  RoundBarrier barrier(3, rec.Fn());
  ASSERT_OK(barrier.RemoveParty(1, 0));
  ASSERT_OK(barrier.RemoveParty(2, 0));
  EXPECT_EQ(barrier.remaining(), 1u);
  for (int extra = 0; extra < 2; ++extra) {
    absl::StatusOr<bool> a = barrier.Arrive(0, 0, 1);
    ASSERT_OK(a);
    EXPECT_FALSE(*a) << extra;
  }
  absl::StatusOr<bool> a = barrier.Arrive(0, 0, 1);
  ASSERT_OK(a);
  EXPECT_TRUE(*a);
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0].second, 3u);
}

TEST(RoundBarrierTest, RejectsBadRemovals) {
  Recorder rec;
  RoundBarrier barrier(3, rec.Fn());
  // A round the destination has not reached, or one long confirmed.
  absl::Status s = barrier.RemoveParty(0, 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("channel 0"), HasSubstr("round 1"),
                                 HasSubstr("in round 0")));
  ASSERT_OK(barrier.RemoveParty(0, 0));
  s = barrier.RemoveParty(0, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("channel 0"), HasSubstr("twice")));
  // Rounds 0 and 1 complete with parties 1 and 2 (round 0 needs the extra
  // SYNC of each).
  for (uint64_t round : {0, 1}) {
    absl::StatusOr<bool> a1;
    std::thread t([&] {
      a1 = barrier.Arrive(1, round, 1);
      if (a1.ok() && !*a1) a1 = barrier.Arrive(1, round, 1);
    });
    absl::StatusOr<bool> a2 = barrier.Arrive(2, round, 1);
    if (a2.ok() && !*a2) a2 = barrier.Arrive(2, round, 1);
    t.join();
    ASSERT_OK(Done(a1)) << round;
    ASSERT_OK(Done(a2)) << round;
  }
  s = barrier.RemoveParty(1, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("round 0"), HasSubstr("in round 2")));
  barrier.Abort();
  EXPECT_EQ(barrier.RemoveParty(1, 2).status().code(),
            absl::StatusCode::kAborted);
}

TEST(RoundBarrierTest, ConcurrentArrivalsAndRemovalsKeepRoundsExact) {
  // Four parties run 100 rounds; in round 40 two of them stop and are
  // removed while the others are anywhere in the round. Each survivor
  // sends one more SYNC per removal, like the source does.
  constexpr int kParties = 4, kRounds = 100, kLossRound = 40;
  Recorder rec;
  RoundBarrier barrier(kParties, rec.Fn());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kParties; ++i) {
    threads.emplace_back([&, i] {
      for (uint64_t r = 0; r < kRounds; ++r) {
        if (i >= 2 && r == kLossRound) {
          barrier.Detach(i);
          return;
        }
        absl::StatusOr<bool> a = barrier.Arrive(i, r, 1);
        while (a.ok() && !*a) a = barrier.Arrive(i, r, 0);
        if (!a.ok()) {
          failures.fetch_add(1);
          return;
        }
      }
    });
  }
  // Declared gone once the destination is in the loss round.
  while (barrier.completed_rounds() < kLossRound)
    absl::SleepFor(absl::Milliseconds(1));
  for (uint32_t gone : {2u, 3u}) {
    absl::StatusOr<uint64_t> e = barrier.RemoveParty(gone, kLossRound);
    ASSERT_OK(e);
    EXPECT_EQ(*e, static_cast<uint64_t>(kLossRound));
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(rec.calls.size(), static_cast<size_t>(kRounds));
  for (uint64_t r = 0; r < kRounds; ++r) {
    EXPECT_EQ(rec.calls[r].second, r < kLossRound ? 4u : 2u) << r;
  }
}

}  // namespace
}  // namespace ramferry::engine
