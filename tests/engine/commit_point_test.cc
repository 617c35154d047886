// The commit point (audit 3, F4): a refusal by the destination at FINISH
// (its commit hook, a cancel there) reaches the source as a definite "not
// committed" before the source would have to call the outcome unknown, so
// the source may resume its workload while the destination discards what
// it received. Sealed and unsealed sessions alike: the destination sends
// no ERROR once it committed, so one read before FINISH_ACK proves it did
// not (on a sealed session the control channel's tag proves it is the
// destination's). The tamper case (pages a forged, cut packet left behind)
// is ForgedCutTest's, in attack_test.cc; a lost FINISH_ACK, which must
// stay "unknown", is FinishCutTest's there.
#include <atomic>
#include <cstdio>
#include <future>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/control.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/attack_relay.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/uffd_skip.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::MakeRegion;

const std::string kKey = "commit point test key, 32 bytes!";

// A keyed session whose stalls and rounds end within seconds, so a
// broken commit point fails the test rather than hanging it.
SessionOptions KeyedOptions() {
  SessionOptions opt = testing::InsecureOptions();
  opt.insecure = false;
  opt.auth_key = kKey;
  opt.stall_timeout = absl::Seconds(5);
  opt.round_timeout = absl::Seconds(10);
  return opt;
}

// What the destination does at its commit point.
enum class AtCommit {
  kCommit,           // the hook says yes
  kRefuse,           // the hook refuses (a cancel that came first)
  kAbortThenCommit,  // Receiver::Abort from the hook (a cancel racing it)
};

struct Ends {
  absl::Status source;  // Finish
  CommitOutcome outcome = CommitOutcome::kPending;
  bool finish_sent = false;
  absl::Status destination;  // Serve
  int commits = 0;
  bool same_bytes = false;
};

// One round, then Finish, against a destination doing `at` at its commit
// point; `sealed`: keyed, stream protected (mac), else --insecure.
Ends RunToFinish(bool sealed, AtCommit at) {
  auto src = MakeRegion(1, 2 << 20, /*seed=*/7, /*fill=*/true);
  auto dst = MakeRegion(1, 2 << 20);
  SessionOptions opt = testing::InsecureOptions();
  if (sealed) {
    opt.insecure = false;
    opt.auth_key = kKey;
    opt.protect = Protection::kMac;
  }
  opt.stall_timeout = absl::Seconds(5);
  opt.round_timeout = absl::Seconds(10);
  Ends ends;
  absl::StatusOr<std::unique_ptr<Receiver>> rx =
      Receiver::Listen(opt, {&dst.region, 1});
  if (!rx.ok()) {
    ends.destination = rx.status();
    return ends;
  }
  Receiver* receiver = rx->get();
  std::atomic<int> commits{0};
  receiver->OnCommit([&commits, receiver, at]() -> absl::Status {
    ++commits;
    switch (at) {
      case AtCommit::kCommit:
        return absl::OkStatus();
      case AtCommit::kRefuse:
        return absl::CancelledError("refused by the test's commit hook");
      case AtCommit::kAbortThenCommit:
        receiver->Abort(absl::CancelledError("cancelled on the destination"));
        return absl::OkStatus();
    }
    return absl::OkStatus();
  });
  opt.port = receiver->port();
  std::future<absl::Status> served =
      std::async(std::launch::async, [receiver] { return receiver->Serve(); });
  {
    absl::StatusOr<std::unique_ptr<Sender>> sender =
        Sender::Connect(opt, {&src.region, 1});
    if (!sender.ok()) {
      receiver->Abort(absl::CancelledError("test: no source"));
      ends.source = sender.status();
    } else {
      DirtyBitmap dirty(src.region.page_count());
      dirty.SetAll();
      DirtyBitmap* bitmaps[] = {&dirty};
      ends.source = (*sender)->SendRound(bitmaps).status();
      if (ends.source.ok()) ends.source = (*sender)->Finish();
      ends.outcome = (*sender)->commit_outcome();
      ends.finish_sent = (*sender)->finish_sent();
    }
  }  // the Sender closes: a destination still serving ends too
  ends.destination = served.get();
  ends.commits = commits.load();
  ends.same_bytes = testing::SameBytes(src.region, dst.region);
  return ends;
}

class CommitPointTest : public ::testing::TestWithParam<bool> {};

TEST_P(CommitPointTest, ACommittedFinishIsCommittedOnBothEnds) {
  const Ends e = RunToFinish(GetParam(), AtCommit::kCommit);
  EXPECT_OK(e.source);
  EXPECT_OK(e.destination);
  EXPECT_EQ(e.outcome, CommitOutcome::kCommitted);
  EXPECT_EQ(e.commits, 1);
  EXPECT_TRUE(e.same_bytes);
}

// audit-3-repro/py_commit.py: the source said "the outcome is unknown"
// and kept its workload paused, though it held the destination's refusal.
TEST_P(CommitPointTest, AHookRefusalReachesTheSourceAsNotCommitted) {
  const Ends e = RunToFinish(GetParam(), AtCommit::kRefuse);
  SCOPED_TRACE(absl::StrCat("source: ", e.source.ToString(),
                            "\ndestination: ", e.destination.ToString()));
  EXPECT_EQ(e.commits, 1);
  EXPECT_TRUE(e.finish_sent);  // refused at the commit point, not before
  EXPECT_TRUE(absl::IsCancelled(e.destination));
  EXPECT_THAT(std::string(e.destination.message()),
              HasSubstr("refused by the test's commit hook"));
  EXPECT_THAT(e.source,
              StatusIs(absl::StatusCode::kCancelled,
                       HasSubstr("refused by the test's commit hook")));
  EXPECT_EQ(e.outcome, CommitOutcome::kNotCommitted)
      << CommitOutcomeName(e.outcome);
  EXPECT_THAT(std::string(e.source.message()), HasSubstr("not committed"));
  EXPECT_THAT(std::string(e.source.message()),
              HasSubstr("refused by the test's commit hook"));
  EXPECT_THAT(std::string(e.source.message()),
              ::testing::Not(HasSubstr("outcome is unknown")));
}

// A cancel (Receiver::Abort) that lands while the destination is at its
// commit point, after the hook said yes: the session failed first, so the
// destination does not commit, and the source learns it.
TEST_P(CommitPointTest, ACancelAtTheCommitPointRefusesFinish) {
  const Ends e = RunToFinish(GetParam(), AtCommit::kAbortThenCommit);
  SCOPED_TRACE(absl::StrCat("source: ", e.source.ToString(),
                            "\ndestination: ", e.destination.ToString()));
  EXPECT_TRUE(e.finish_sent);
  EXPECT_TRUE(absl::IsCancelled(e.destination));
  EXPECT_THAT(std::string(e.destination.message()),
              HasSubstr("cancelled on the destination"));
  EXPECT_THAT(e.source, StatusIs(absl::StatusCode::kCancelled,
                                 HasSubstr("cancelled on the destination")));
  EXPECT_EQ(e.outcome, CommitOutcome::kNotCommitted)
      << CommitOutcomeName(e.outcome);
  EXPECT_THAT(std::string(e.source.message()),
              HasSubstr("cancelled on the destination"));
}

INSTANTIATE_TEST_SUITE_P(Guard, CommitPointTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "sealed" : "insecure";
                         });

// A cancel on the destination after the last round and before the source
// sends FINISH: whether the source's FINISH left before the ERROR came or
// not, the destination did not commit and the source knows it.
TEST(CommitPointTest, ACancelJustBeforeFinishIsNotCommitted) {
  auto src = MakeRegion(1, 1 << 20, /*seed=*/9, /*fill=*/true);
  auto dst = MakeRegion(1, 1 << 20);
  SessionOptions opt = testing::InsecureOptions();
  opt.auth_key = kKey;
  opt.insecure = false;
  opt.stall_timeout = absl::Seconds(5);
  testing::ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  absl::StatusOr<std::unique_ptr<Sender>> sender =
      Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  ASSERT_OK((*sender)->SendRound(bitmaps));
  rx.receiver().Abort(absl::CancelledError("cancelled before FINISH"));
  const absl::Status destination = rx.result();
  const absl::Status source = (*sender)->Finish();
  EXPECT_TRUE(absl::IsCancelled(destination)) << destination;
  EXPECT_THAT(source, StatusIs(absl::StatusCode::kCancelled,
                               HasSubstr("cancelled before FINISH")));
  EXPECT_EQ((*sender)->commit_outcome(), CommitOutcome::kNotCommitted)
      << source;
  EXPECT_THAT(std::string(source.message()),
              HasSubstr("cancelled before FINISH"));
}

// The other side of the rule: an ERROR the destination never sent. A relay
// makes one up just before the destination's FINISH_ACK. On a sealed
// session it fails its tag: the source cannot tell what the destination
// did and says the outcome is unknown, while the destination committed;
// it must never say "not committed" (the source would resume beside the
// destination: two live copies). Unsealed (a key, --protect=none), the
// stream is taken at its word, as its pages and its FINISH_ACK are (whoever
// can forge this ERROR can as well forge FINISH_ACK, so the source stops a
// workload no destination runs): the source believes it, as documented
// (docs/protocol.md 5.6, docs/security.md).
class ForgedRefusalTest : public ::testing::TestWithParam<Protection> {};

TEST_P(ForgedRefusalTest, OnlyTheDestinationsOwnErrorIsARefusal) {
  const Protection protect = GetParam();
  auto src = MakeRegion(1, 1 << 20, /*seed=*/17, /*fill=*/true);
  auto dst = MakeRegion(1, 1 << 20);
  SessionOptions opt = KeyedOptions();
  opt.protect = protect;
  testing::ServingReceiver rx(opt, {dst.region});
  testing::AttackRelay relay(rx.port());
  testing::Attack forge;
  forge.kind = testing::AttackKind::kForgeErrorAtFrame;
  forge.control = true;
  forge.frame_type = static_cast<uint32_t>(proto::ControlType::kFinishAck);
  relay.Arm(forge);
  opt.port = relay.port();
  absl::Status source;
  CommitOutcome outcome = CommitOutcome::kPending;
  {
    absl::StatusOr<std::unique_ptr<Sender>> sender =
        Sender::Connect(opt, {&src.region, 1});
    ASSERT_OK(sender);
    DirtyBitmap dirty(src.region.page_count());
    dirty.SetAll();
    DirtyBitmap* bitmaps[] = {&dirty};
    ASSERT_OK((*sender)->SendRound(bitmaps));
    source = (*sender)->Finish();
    outcome = (*sender)->commit_outcome();
  }
  const absl::Status destination = rx.result();
  ASSERT_FALSE(relay.events().empty()) << relay.Log();
  std::printf(
      "[commit-point] forged ERROR before FINISH_ACK | %s | source %s "
      "(%s) | destination %s\n",
      ProtectionName(protect), CommitOutcomeName(outcome),
      source.ToString().c_str(), destination.ToString().c_str());
  EXPECT_OK(destination);  // it committed: FINISH_ACK went
  if (protect == Protection::kNone) {
    // Unsealed, the forged ERROR is taken at its word.
    EXPECT_THAT(source, StatusIs(absl::StatusCode::kCancelled,
                                 HasSubstr("forged by the relay")));
    EXPECT_EQ(outcome, CommitOutcome::kNotCommitted);
    return;
  }
  // Sealed, it fails its tag, which ends the control connection.
  EXPECT_THAT(source, StatusIs(absl::StatusCode::kUnavailable,
                               AllOf(HasSubstr("authentication tag"),
                                     HasSubstr("outcome is unknown"))));
  EXPECT_EQ(outcome, CommitOutcome::kUnknown) << CommitOutcomeName(outcome);
}

INSTANTIATE_TEST_SUITE_P(Protect, ForgedRefusalTest,
                         ::testing::Values(Protection::kMac,
                                           Protection::kEncrypt,
                                           Protection::kNone),
                         [](const auto& info) {
                           return std::string(ProtectionName(info.param));
                         });

// Post-copy's switch is the commit point there (audit 3, F10): the
// destination's hook runs when MISSING_PAGES arrive, before it arms, and
// not again at FINISH; a refusal (a cancel that came first) means it never
// arms, and the source, which sent MISSING_PAGES, learns that it did not
// commit instead of keeping its workload paused for good.
class PostcopyCommitTest : public ::testing::TestWithParam<AtCommit> {};

TEST_P(PostcopyCommitTest, TheHookDecidesTheSwitch) {
  SKIP_WITHOUT_USERFAULTFD();
  const AtCommit at = GetParam();
  const bool refuse = at != AtCommit::kCommit;
  auto src = MakeRegion(1, 2 << 20, /*seed=*/13, /*fill=*/true);
  auto dst = MakeRegion(1, 2 << 20);
  SessionOptions opt = KeyedOptions();
  opt.postcopy = true;
  absl::StatusOr<std::unique_ptr<Receiver>> rx =
      Receiver::Listen(opt, {&dst.region, 1});
  ASSERT_OK(rx);
  Receiver* receiver = rx->get();
  std::atomic<int> commits{0};
  std::atomic<int> armed{0};
  std::atomic<int> armed_after_commit{0};
  receiver->OnCommit([&]() -> absl::Status {
    ++commits;
    if (at == AtCommit::kRefuse) {
      return absl::CancelledError("switch refused by the test");
    }
    if (at == AtCommit::kAbortThenCommit) {
      // A cancel accepted just before the destination arms.
      receiver->Abort(absl::CancelledError("switch refused by the test"));
    }
    return absl::OkStatus();
  });
  receiver->OnPostcopyArmed([&] {
    if (commits.load() == 1) ++armed_after_commit;
    ++armed;
  });
  opt.port = receiver->port();
  std::future<absl::Status> served =
      std::async(std::launch::async, [receiver] { return receiver->Serve(); });
  absl::Status switched, finished;
  CommitOutcome outcome;
  {
    absl::StatusOr<std::unique_ptr<Sender>> sender =
        Sender::Connect(opt, {&src.region, 1});
    ASSERT_OK(sender);
    DirtyBitmap dirty(src.region.page_count());
    dirty.SetAll();
    DirtyBitmap* bitmaps[] = {&dirty};
    ASSERT_OK((*sender)->SendRound(bitmaps));
    for (uint64_t p = 0; p < src.region.page_count(); p += 7) dirty.Set(p);
    switched = (*sender)->StartPostcopy(bitmaps);
    if (switched.ok()) {
      EXPECT_EQ((*sender)->commit_outcome(), CommitOutcome::kCommitted);
      finished = (*sender)->CompletePostcopy();
      if (finished.ok()) finished = (*sender)->Finish();
    }
    outcome = (*sender)->commit_outcome();
  }
  const absl::Status destination = served.get();
  SCOPED_TRACE(absl::StrCat("switch: ", switched.ToString(),
                            "\nfinish: ", finished.ToString(),
                            "\ndestination: ", destination.ToString()));
  EXPECT_EQ(commits.load(), 1);  // at the switch, not again at FINISH
  if (refuse) {
    EXPECT_EQ(armed.load(), 0);
    EXPECT_TRUE(absl::IsCancelled(destination));
    EXPECT_THAT(switched, StatusIs(absl::StatusCode::kCancelled,
                                   HasSubstr("switch refused by the test")));
    EXPECT_EQ(outcome, CommitOutcome::kNotCommitted)
        << CommitOutcomeName(outcome);
    EXPECT_THAT(std::string(switched.message()), HasSubstr("not committed"));
    EXPECT_THAT(std::string(switched.message()),
                HasSubstr("switch refused by the test"));
  } else {
    EXPECT_EQ(armed_after_commit.load(), 1);
    EXPECT_OK(switched);
    EXPECT_OK(finished);
    EXPECT_OK(destination);
    EXPECT_EQ(outcome, CommitOutcome::kCommitted);
    EXPECT_TRUE(testing::SameBytes(src.region, dst.region));
  }
}

INSTANTIATE_TEST_SUITE_P(Hook, PostcopyCommitTest,
                         ::testing::Values(AtCommit::kCommit, AtCommit::kRefuse,
                                           AtCommit::kAbortThenCommit),
                         [](const auto& info) {
                           switch (info.param) {
                             case AtCommit::kCommit:
                               return "committed";
                             case AtCommit::kRefuse:
                               return "refused";
                             case AtCommit::kAbortThenCommit:
                               return "cancelled";
                           }
                           return "?";
                         });

}  // namespace
}  // namespace ramferry
