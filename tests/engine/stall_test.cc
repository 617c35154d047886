// A stopped peer (SIGSTOP: its kernel keeps the connections open and
// ACKs) against an idle one. Heartbeats on the control connection tell
// them apart: an idle peer keeps the session alive for as long as it
// likes, a stopped one ends it on both sides within the stall timeout, and
// the source still knows the last round the destination confirmed.
#include <signal.h>

#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/child_peers.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;

using testing::ChildDestination;
using testing::ChildSource;
using ::testing::HasSubstr;
using testing::LoopbackPair;
using testing::MakeRegion;
using testing::ServingReceiver;

constexpr uint64_t kBytes = 8 << 20;
constexpr absl::Duration kStall = absl::Seconds(1);
// The stall timeout and room for a slow (sanitizer) build to notice.
constexpr absl::Duration kNoticeBound = absl::Seconds(5);

SessionOptions Options() {
  SessionOptions o = ::ramferry::testing::InsecureOptions();
  o.channels = 2;
  o.stall_timeout = kStall;
  return o;
}

TEST(StallTest, IdleSourceKeepsTheSessionAlive) {
  LoopbackPair pair(kBytes, 21, Options());
  ASSERT_NE(pair.sender, nullptr);
  ASSERT_OK(pair.SendEverything());
  // Four stall timeouts with nothing to send: only heartbeats flow.
  absl::SleepFor(4 * kStall);
  EXPECT_FALSE(pair.rx->done()) << pair.rx->result();
  ASSERT_OK(pair.SendEverything());
  ASSERT_OK(pair.sender->Finish());
  EXPECT_OK(pair.rx->result());
  EXPECT_TRUE(testing::SameBytes(pair.src.region, pair.dst.region));
}

TEST(StallTest, StoppedDestinationBetweenRoundsEndsBothSides) {
  SessionOptions opt = Options();
  ChildDestination child(opt, kBytes);
  opt.port = child.port();
  auto src = MakeRegion(1, kBytes, 22, /*fill=*/true);
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  ASSERT_OK((*sender)->SendRound(bitmaps));

  child.Signal(SIGSTOP);
  // A round small enough for the socket buffers: no send blocks, so only
  // the missing heartbeats can tell the source its peer is gone (the
  // round timeout is ten minutes).
  dirty.SetRange(0, 8);
  const absl::Time start = absl::Now();
  absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
  ASSERT_THAT(r,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("no control message, not even a heartbeat")));
  EXPECT_LT(absl::Now() - start, kNoticeBound);
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("destination stalled"));
  EXPECT_THAT(r.status().message(), HasSubstr("confirmed 1 round"));
  EXPECT_EQ((*sender)->confirmed_rounds(), 1u);

  // Woken up, the destination finds its source gone and says so.
  child.Signal(SIGCONT);
  const std::string said = child.AwaitResult(kNoticeBound);
  EXPECT_FALSE(said.empty());
  EXPECT_THAT(said, ::testing::Not(HasSubstr("OK")));
}

TEST(StallTest, StoppedSourceEndsTheDestination) {
  SessionOptions opt = Options();
  ChildSource source(opt, kBytes, 23, /*rounds=*/1);
  auto dst = MakeRegion(1, kBytes);
  ServingReceiver rx(opt, {dst.region});
  ASSERT_TRUE(source.Connect(rx.port()));
  while (rx.receiver().applied_rounds() < 1) {
    absl::SleepFor(absl::Milliseconds(1));
    ASSERT_FALSE(rx.done()) << rx.result();
  }
  // Idle but alive: no stall.
  absl::SleepFor(2 * kStall);
  EXPECT_FALSE(rx.done()) << rx.result();

  source.Signal(SIGSTOP);
  const absl::Time stopped = absl::Now();
  absl::Status s = rx.result();
  EXPECT_LT(absl::Now() - stopped, kNoticeBound);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("source stalled"));
  EXPECT_EQ(rx.receiver().applied_rounds(), 1u);
}

}  // namespace
}  // namespace ramferry
