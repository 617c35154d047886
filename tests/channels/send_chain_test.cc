// Every completion outcome of a chained send, injected: full, short,
// cancelled, retryable and fatal errors, with and without a notification.
#include "channels/send_chain.h"

#include <errno.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::channels {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;

// The chain never waits on completions itself.
class NoWaiting : public CompletionSource {
 public:
  absl::Status Reap(HeaderSlots&, bool) override {
    return absl::InternalError("unexpected wait");
  }
};

class SendChainTest : public ::testing::Test {
 protected:
  SendChainTest()
      : slots_(4, 64, CompletionPolicy::kSlot, &source_, &stats_),
        chain_(&slots_, &stats_, /*max_chain=*/8) {}

  SendChain::Send Make(uint32_t slot, uint64_t total, bool zero_copy = true) {
    SendChain::Send s;
    s.slot = slot;
    s.zero_copy = zero_copy;
    s.total = total;
    return s;
  }
  // Starts a chain and returns copies of its sends.
  std::vector<SendChain::Send> Start() {
    auto sends = chain_.Start();
    return {sends.begin(), sends.end()};
  }

  NoWaiting source_;
  TransportStats stats_;
  HeaderSlots slots_;
  SendChain chain_;
};

TEST_F(SendChainTest, FullSendsCompleteAndNotificationsFreeTheSlots) {
  chain_.Queue(Make(0, 100));
  chain_.Queue(Make(1, 200));
  auto sends = Start();
  ASSERT_EQ(sends.size(), 2u);
  EXPECT_TRUE(chain_.in_flight());
  EXPECT_FALSE(chain_.has_queued());
  ASSERT_OK(chain_.OnCompletion(chain_.UserData(0), 100, true));
  ASSERT_OK(chain_.OnCompletion(chain_.UserData(1), 200, true));
  EXPECT_FALSE(chain_.in_flight());
  EXPECT_FALSE(chain_.has_queued());
  // Still pinned until the notifications arrive.
  EXPECT_TRUE(slots_.busy(0));
  EXPECT_TRUE(slots_.busy(1));
  ASSERT_OK(slots_.Complete(sends[0].token, true));
  ASSERT_OK(slots_.Complete(sends[1].token, true));
  EXPECT_EQ(slots_.busy_slots(), 0u);
  EXPECT_EQ(stats_.short_sends.get(), 0u);
}

TEST_F(SendChainTest, ShortSendAndCancelledLinksGoAgainInOrderAheadOfNewer) {
  chain_.Queue(Make(0, 100));
  chain_.Queue(Make(1, 50));
  chain_.Queue(Make(2, 30, /*zero_copy=*/false));
  auto first = Start();
  chain_.Queue(Make(3, 10));  // queued while the chain is in flight
  // The first send went out in part; the link broke, the rest was cancelled.
  ASSERT_OK(chain_.OnCompletion(chain_.UserData(0), 60, true));
  ASSERT_OK(chain_.OnCompletion(chain_.UserData(1), -ECANCELED, false));
  ASSERT_OK(chain_.OnCompletion(chain_.UserData(2), -ECANCELED, false));
  EXPECT_EQ(stats_.short_sends.get(), 1u);
  // The cancelled sends pinned nothing: their tokens are released now.
  EXPECT_TRUE(slots_.busy(0));  // awaits the partial send's notification
  auto again = Start();
  ASSERT_EQ(again.size(), 4u);
  EXPECT_EQ(again[0].slot, 0u);
  EXPECT_EQ(again[0].offset, 60u);  // only the remainder
  EXPECT_EQ(again[0].total, 100u);
  EXPECT_EQ(again[1].slot, 1u);
  EXPECT_EQ(again[1].offset, 0u);
  EXPECT_EQ(again[2].slot, 2u);
  EXPECT_EQ(again[3].slot, 3u);  // the newer send stays behind them
  // Fresh tokens for the resends, newer than every earlier one.
  EXPECT_GT(again[0].token, first[2].token);
  EXPECT_NE(again[0].token, again[3].token);
}

TEST_F(SendChainTest, RetryableErrorsResendTheWholeRemainder) {
  for (int err : {EAGAIN, EINTR, ENOBUFS}) {
    chain_.Queue(Make(0, 100));
    Start();
    ASSERT_OK(chain_.OnCompletion(chain_.UserData(0), -err, false)) << err;
    if (err == ENOBUFS) chain_.RoomFreed();  // see the test below
    auto again = Start();
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].offset, 0u);
    ASSERT_OK(chain_.OnCompletion(chain_.UserData(0), 100, false));
  }
  EXPECT_EQ(stats_.enobufs_retries.get(), 1u);
  EXPECT_EQ(slots_.busy_slots(), 0u);
}

// ENOBUFS: the kernel could not pin more pages. Going again at once would
// be refused again at once; the send waits until a notification says
// pinned pages were let go.
TEST_F(SendChainTest, EnobufsWaitsForFreedRoomBeforeGoingAgain) {
  chain_.Queue(Make(0, 100));
  chain_.Queue(Make(1, 100));
  Start();
  ASSERT_OK(chain_.OnCompletion(chain_.UserData(0), -ENOBUFS, false));
  ASSERT_OK(chain_.OnCompletion(chain_.UserData(1), -ECANCELED, false));
  EXPECT_TRUE(chain_.starved());
  EXPECT_TRUE(chain_.has_queued());
  EXPECT_TRUE(Start().empty());  // no busy resubmission
  EXPECT_FALSE(chain_.in_flight());
  chain_.RoomFreed();
  auto again = Start();
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].slot, 0u);
  EXPECT_EQ(again[1].slot, 1u);
  ASSERT_OK(chain_.OnCompletion(chain_.UserData(0), 100, false));
  ASSERT_OK(chain_.OnCompletion(chain_.UserData(1), 100, false));
  EXPECT_FALSE(chain_.starved());
  EXPECT_EQ(slots_.busy_slots(), 0u);
}

TEST_F(SendChainTest, FatalErrorsNameTheErrno) {
  chain_.Queue(Make(0, 100));
  Start();
  absl::Status s = chain_.OnCompletion(chain_.UserData(0), -EPIPE, false);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("Broken pipe"));
}

TEST_F(SendChainTest, UnknownOrRepeatedCompletionsAreErrors) {
  chain_.Queue(Make(0, 100));
  Start();
  EXPECT_THAT(
      chain_.OnCompletion(chain_.UserData(0) + (5ull << 32), 100, true),
      StatusIs(
          absl::StatusCode::kInternal,
          HasSubstr(
              "completion for send 0 (position 5), which is not in flight")));
  EXPECT_THAT(
      chain_.OnCompletion(chain_.UserData(0) + 1, 100, true),
      StatusIs(
          absl::StatusCode::kInternal,
          HasSubstr(
              "completion for send 1 (position 0), which is not in flight")));
  ASSERT_OK(chain_.OnCompletion(chain_.UserData(0), 50, true));
  // The chain is over; the same tag again is not in flight.
  EXPECT_THAT(
      chain_.OnCompletion((0ull << 32) | 0, 50, true),
      StatusIs(
          absl::StatusCode::kInternal,
          HasSubstr(
              "completion for send 0 (position 0), which is not in flight")));
}

TEST_F(SendChainTest, ChainsAreCappedAtTheQueueSize) {
  for (int i = 0; i < 11; ++i) chain_.Queue(Make(i % 4, 10, false));
  EXPECT_EQ(Start().size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    ASSERT_OK(chain_.OnCompletion(chain_.UserData(i), 10, false));
  }
  EXPECT_EQ(Start().size(), 3u);
}

}  // namespace
}  // namespace ramferry::channels
