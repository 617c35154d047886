// Receive-credit accounting, both halves, without an RDMA device.
#include "channels/rdma/credits.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::channels {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;

TEST(SendCreditsTest, UncountedSendsAlwaysGo) {
  SendCredits c;
  EXPECT_FALSE(c.counted());
  EXPECT_TRUE(c.CanSend(1000));
  c.Take(1000);
  EXPECT_TRUE(c.CanSend(1));
  EXPECT_THAT(
      c.Grant(4),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "RDMA credits from a destination that did not negotiate them")))
      << "credits nobody negotiated";
}

TEST(SendCreditsTest, NothingGoesBeforeTheFirstGrant) {
  SendCredits c(true);
  EXPECT_FALSE(c.CanSend(1));
  EXPECT_TRUE(c.CanSend(0)) << "a post of WRITEs alone needs no receive";
  ASSERT_OK(c.Grant(4));
  EXPECT_EQ(c.window(), 4u);
  EXPECT_TRUE(c.CanSend(4));
  EXPECT_FALSE(c.CanSend(5));
}

TEST(SendCreditsTest, SpendsAndGetsBackUpToTheWindow) {
  SendCredits c(true);
  ASSERT_OK(c.Grant(4));
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(c.CanSend(1));
    c.Take(1);
  }
  EXPECT_FALSE(c.CanSend(1));
  EXPECT_EQ(c.in_use(), 4u);
  ASSERT_OK(c.Grant(3));
  EXPECT_EQ(c.available(), 3u);
  EXPECT_EQ(c.available() + c.in_use(), c.window());
}

TEST(SendCreditsTest, ReturningMoreThanInUseIsThePeersError) {
  SendCredits c(true);
  ASSERT_OK(c.Grant(4));
  c.Take(2);
  absl::Status s = c.Grant(3);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("2 in use"));
  EXPECT_EQ(c.available(), 2u) << "a refused grant changes nothing";
  EXPECT_THAT(c.Grant(0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("RDMA credits message grants none")));
}

TEST(CreditReturnTest, ReturnsInBatchesOfAnEighth) {
  CreditReturn r(256);
  EXPECT_EQ(r.batch(), 32u);
  for (int i = 0; i < 31; ++i) {
    r.Reposted();
    EXPECT_EQ(r.TakeDue(), 0u);
  }
  r.Reposted();
  EXPECT_EQ(r.TakeDue(), 32u);
  EXPECT_EQ(r.pending(), 0u);
  EXPECT_EQ(CreditReturn(4).batch(), 1u) << "a small window returns each";
}

// The property that makes batching safe: a sender out of credits never
// waits for a batch that cannot fill. Play a sender and a receiver that
// reads everything it has: however the window and batch fall, the sender
// always gets credits back.
TEST(CreditReturnTest, ASenderOutOfCreditsIsAlwaysPaidBack) {
  for (uint32_t window : {1u, 2u, 7u, 16u, 256u}) {
    SendCredits send(true);
    CreditReturn back(window);
    ASSERT_OK(send.Grant(window));
    uint32_t in_flight = 0;  // sent, not yet read and posted again
    for (int step = 0; step < 1000; ++step) {
      while (send.CanSend(1)) {
        send.Take(1);
        ++in_flight;
      }
      // The receiver reads all of it, posting each receive again.
      for (; in_flight > 0; --in_flight) back.Reposted();
      const uint32_t due = back.TakeDue();
      ASSERT_GT(due, 0u) << "window " << window << ": the sender starves";
      ASSERT_OK(send.Grant(due));
    }
  }
}

}  // namespace
}  // namespace ramferry::channels
