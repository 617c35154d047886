// Real faults on loopback: the peer process killed or stopped mid-round, or
// one end giving up. Both ends must end with a clear error, in bounded
// time, and the source must know the last round the destination confirmed.
#include <signal.h>

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/sender.h"
#include "tests/support/child_peers.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::AllOf;
using ::testing::AnyOf;
using testing::ChildDestination;
using testing::ChildSource;
using ::testing::HasSubstr;
using testing::LoopbackPair;
using testing::MakeRegion;
using testing::ScaledBytes;
using testing::ServingReceiver;

// Runs SendRound on a thread so the test can act mid-round.
struct RoundInFlight {
  explicit RoundInFlight(Sender* s, DirtyBitmap* d) : bitmaps{d} {
    thread = std::thread([this, s] {
      result = s->SendRound(bitmaps);
      done.store(true);
    });
  }
  ~RoundInFlight() { thread.join(); }
  // Waits until the sender has put `packets` packets on the wire.
  static void AwaitPackets(const Sender& s, uint64_t packets) {
    while (s.stats().Total().packets < packets)
      absl::SleepFor(absl::Microseconds(100));
  }
  DirtyBitmap* bitmaps[1];
  absl::StatusOr<RoundResult> result;
  std::atomic<bool> done{false};
  std::thread thread;
};

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bytes_ = ScaledBytes(128ull << 20);
    src_ = MakeRegion(1, bytes_, 11, true);
    opt_.channels = 2;
    opt_.stall_timeout = absl::Seconds(2);
  }
  uint64_t bytes_;
  testing::TestRegion src_;
  SessionOptions opt_ = ::ramferry::testing::InsecureOptions();
};

TEST_F(FaultTest, DestinationKilledMidRound) {
  ChildDestination child(opt_, bytes_);
  opt_.port = child.port();
  auto sender = Sender::Connect(opt_, {&src_.region, 1});
  ASSERT_OK(sender);
  DirtyBitmap dirty(src_.region.page_count());
  dirty.SetRange(0, 16);
  DirtyBitmap* bitmaps[] = {&dirty};
  ASSERT_OK((*sender)->SendRound(bitmaps));  // round 0 confirmed

  dirty.SetAll();
  const absl::Time start = absl::Now();
  {
    RoundInFlight round(sender->get(), &dirty);
    RoundInFlight::AwaitPackets(**sender, 10);
    // Stop it first, so the round cannot complete before the kill.
    child.Signal(SIGSTOP);
    child.Signal(SIGKILL);
  }
  // RoundInFlight joined: SendRound returned.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // The killed peer's connections closed under the source: UNAVAILABLE.
  ASSERT_THAT((*sender)->SendRound(bitmaps),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(AnyOf(HasSubstr("channel"),
                                   HasSubstr("control connection")),
                             HasSubstr("confirmed 1 round"))));
  EXPECT_EQ((*sender)->confirmed_rounds(), 1u);
  EXPECT_THAT((*sender)->Finish(), StatusIs(absl::StatusCode::kUnavailable,
                                            HasSubstr("confirmed 1 round")));
}

TEST_F(FaultTest, StalledDestinationIsDetected) {
  ChildDestination child(opt_, bytes_);
  opt_.port = child.port();
  auto sender = Sender::Connect(opt_, {&src_.region, 1});
  ASSERT_OK(sender);
  DirtyBitmap dirty(src_.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  child.Signal(SIGSTOP);
  const absl::Time start = absl::Now();
  ASSERT_THAT(
      (*sender)->SendRound(bitmaps),
      StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("stalled")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  child.Signal(SIGCONT);
}

TEST_F(FaultTest, SourceKilledMidRound) {
  ChildSource source(opt_, bytes_, 11);
  auto dst = MakeRegion(1, bytes_);
  ServingReceiver rx(opt_, {dst.region});
  ASSERT_TRUE(source.Connect(rx.port()));
  // Kill it in the middle of its second round.
  while (rx.receiver().applied_rounds() < 1 ||
         rx.receiver().stats().Total().pages < bytes_ / 4096 + 100) {
    absl::SleepFor(absl::Microseconds(100));
    ASSERT_FALSE(rx.done()) << rx.result();
  }
  source.Kill();
  const absl::Time start = absl::Now();
  absl::Status s = rx.result();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(),
              AnyOf(HasSubstr("channel"),
                    HasSubstr("control connection to the source")));
}

TEST_F(FaultTest, SourceAbortReachesTheDestination) {
  LoopbackPair p(1 << 20, 12, opt_);
  ASSERT_NE(p.sender, nullptr);
  p.sender->Abort(absl::CancelledError("operator cancelled the migration"));
  absl::Status s = p.rx->result();
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("source reported: operator cancelled"));
  EXPECT_TRUE(absl::IsCancelled(p.SendEverything().status()));
}

TEST_F(FaultTest, DestinationAbortReachesTheSource) {
  LoopbackPair p(1 << 20, 13, opt_);
  ASSERT_NE(p.sender, nullptr);
  ASSERT_OK(p.SendEverything());
  p.rx->receiver().Abort(
      absl::ResourceExhaustedError("destination out of memory"));
  EXPECT_TRUE(absl::IsResourceExhausted(p.rx->result()));
  ASSERT_THAT(
      p.SendEverything(),
      StatusIs(absl::StatusCode::kResourceExhausted,
               HasSubstr("destination reported: destination out of memory")));
}

}  // namespace
}  // namespace ramferry
