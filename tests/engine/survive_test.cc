// Surviving a dead data channel (SessionOptions::survive_channel_loss): a
// real Sender and Receiver on loopback whose data channels go through the
// fault-injecting transport (tests/support/faulty_transport.h), which kills
// one channel's real connection mid-round while the others live. The
// destination must end byte-identical and both ends must report the loss;
// without the option, the same fault must end both sides with an error.
#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "channels/transport.h"
#include "channels/transport_family.h"
#include "channels/uring_zerocopy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/control.h"
#include "ramferry/sender.h"
#include "tests/support/fake_source.h"
#include "tests/support/faulty_transport.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/transport_selection.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::AllOf;
using ::testing::AnyOf;
using testing::FaultInjector;
using testing::FaultKind;
using testing::FaultOp;
using testing::FaultPlan;
using ::testing::HasSubstr;
using testing::MakeRegion;
using testing::SameBytes;
using testing::ServingReceiver;

constexpr uint32_t kChannels = 4;
constexpr uint64_t kBytes = 8ull << 20;  // 2048 pages
constexpr uint32_t kPacketPages = 16;
// Well past any healthy round here; a hang would show as a timeout.
constexpr absl::Duration kEndBound = absl::Seconds(10);

// Rewrites `count` random pages of `r` and marks them dirty; returns how
// many distinct pages that was.
uint64_t RewriteRandomPages(const Region& r, uint64_t count,
                            std::mt19937_64& rng, DirtyBitmap& dirty) {
  std::set<uint64_t> pages;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t p = rng() % r.page_count();
    FillRandom(r.page(p), r.page_size, rng(), 1);
    dirty.Set(p);
    pages.insert(p);
  }
  return pages.size();
}

// Stores 8 random bytes into each of `count` random pages of the first
// quarter of `r` (pages a delta-encoding source re-sends as deltas), and
// marks them dirty; returns how many distinct pages that was.
uint64_t StoreIntoRandomPages(const Region& r, uint64_t count,
                              std::mt19937_64& rng, DirtyBitmap& dirty) {
  std::set<uint64_t> pages;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t p = rng() % (r.page_count() / 4);
    const uint64_t v = rng();
    std::memcpy(r.page(p) + (v % (r.page_size / 8)) * 8, &v, 8);
    dirty.Set(p);
    pages.insert(p);
  }
  return pages.size();
}

// Which channels an end reports lost, in order.
std::vector<uint32_t> LostChannels(const SessionStats& s) {
  std::vector<uint32_t> out;
  for (const ChannelLoss& l : s.channels_lost) out.push_back(l.channel);
  return out;
}

// A round here is 512 pages, 32 packets: the 8th send is mid-round.
constexpr uint64_t kMidRound = 8;

// A source and a destination on loopback whose data channels the
// FaultInjector wraps (installed first, so it outlives the session).
class FaultySession {
 public:
  FaultySession(SessionOptions opt, const FaultPlan& plan, uint64_t seed)
      : faults_(plan),
        src_(MakeRegion(1, kBytes, seed, /*fill=*/true)),
        dst_(MakeRegion(1, kBytes)),
        dirty_(src_.region.page_count()),
        rng_(seed) {
    rx_ = std::make_unique<ServingReceiver>(opt,
                                            std::vector<Region>{dst_.region});
    opt.port = rx_->port();
    auto s = Sender::Connect(opt, {&src_.region, 1});
    EXPECT_OK(s);
    if (s.ok()) sender_ = std::move(*s);
  }

  bool connected() const { return sender_ != nullptr; }
  // Later rounds store a few bytes into pages instead of rewriting them.
  void UseSmallStores() { small_stores_ = true; }
  Sender& sender() { return *sender_; }
  ServingReceiver& rx() { return *rx_; }
  FaultInjector& faults() { return faults_; }

  // The fault hits the `more`-th call of the plan's operation from now:
  // with `more` small, mid-way through the next round.
  void ArmIn(uint64_t more) {
    faults_.ArmAt(faults_.calls(faults_.plan().source, faults_.plan().op) +
                  more);
  }

  // Runs `rounds` rounds, each of which must succeed, the fault armed
  // kMidRound sends into round `armed`.
  void SurvivingRounds(int rounds, int armed) {
    for (int round = 0; round < rounds; ++round) {
      if (round == armed) ArmIn(kMidRound);
      absl::StatusOr<RoundResult> r = NextRound();
      ASSERT_OK(r) << "round " << round;
    }
  }

  // The source's report of the channel the fault killed, checked to be
  // the one and only channel it lost.
  ChannelLoss SoleLoss() {
    EXPECT_TRUE(faults_.fired());
    const SessionStats sent = sender_->stats();
    EXPECT_EQ(LostChannels(sent),
              std::vector<uint32_t>{faults_.fired_channel()});
    return sent.channels_lost.empty() ? ChannelLoss{} : sent.channels_lost[0];
  }

  // Round 0 sends everything; each later round rewrites 1/4 of the pages
  // first (on this thread: the source is quiet while a round is sent).
  absl::StatusOr<RoundResult> NextRound() {
    uint64_t expected = src_.region.page_count();
    if (rounds_ == 0) {
      dirty_.SetAll();
    } else if (small_stores_) {
      expected = StoreIntoRandomPages(src_.region, src_.region.page_count() / 4,
                                      rng_, dirty_);
    } else {
      expected = RewriteRandomPages(src_.region, src_.region.page_count() / 4,
                                    rng_, dirty_);
    }
    DirtyBitmap* bitmaps[] = {&dirty_};
    absl::StatusOr<RoundResult> r = sender_->SendRound(bitmaps);
    if (r.ok()) {
      EXPECT_EQ(r->round, rounds_);
      EXPECT_EQ(r->pages, expected) << "round " << rounds_;
      ++rounds_;
    }
    return r;
  }

  // Verifies, finishes, and checks both ends agree byte for byte.
  void FinishIdentical() {
    absl::StatusOr<VerifyReport> v = sender_->Verify();
    ASSERT_OK(v);
    EXPECT_TRUE(v->ok()) << v->pages_mismatched << " pages differ";
    absl::Status done = sender_->Finish();
    ASSERT_OK(done);
    absl::Status served = rx_->result();
    ASSERT_OK(served);
    EXPECT_TRUE(SameBytes(src_.region, dst_.region));
    EXPECT_EQ(rx_->receiver().applied_rounds(), rounds_);
  }

 private:
  FaultInjector faults_;  // first: outlives the session's transports
  testing::TestRegion src_, dst_;
  DirtyBitmap dirty_;
  std::mt19937_64 rng_;
  uint64_t rounds_ = 0;
  bool small_stores_ = false;
  std::unique_ptr<ServingReceiver> rx_;
  std::unique_ptr<Sender> sender_;
};

// The source's next data packet after `ArmIn` resets its connection.
FaultPlan ResetOnSend(FaultKind kind = FaultKind::kReset) {
  return {.source = true,
          .op = FaultOp::kSendPacket,
          .nth = UINT64_MAX,
          .kind = kind};
}

// rdma has no socket to reset: the fault shuts its queue pair down
// (FaultKind::kReset), and the destination's channel sees the disconnect.
class SurviveTest : public ::testing::TestWithParam<TransportKind> {
 protected:
  void SetUp() override {
    if (std::string why = testing::WhyUnavailable(GetParam()); !why.empty()) {
      GTEST_SKIP() << why;
    }
    opt_.transport = GetParam();
    testing::UseTransportHost(opt_);
    opt_.channels = kChannels;
    opt_.packet_pages = kPacketPages;
    opt_.header_slots = 64;
    opt_.survive_channel_loss = true;
    opt_.stall_timeout = absl::Seconds(5);
  }
  SessionOptions opt_ = ::ramferry::testing::InsecureOptions();
};

TEST_P(SurviveTest, OneChannelLostMidRoundEndsByteIdentical) {
  FaultySession p(opt_, ResetOnSend(), 21);
  ASSERT_TRUE(p.connected());
  ASSERT_NO_FATAL_FAILURE(p.SurvivingRounds(5, /*armed=*/2));
  const ChannelLoss loss = p.SoleLoss();
  const uint32_t dead = loss.channel;
  const SessionStats sent = p.sender().stats();
  EXPECT_EQ(loss.round, 2u);
  EXPECT_THAT(loss.reason, HasSubstr(absl::StrCat("channel ", dead)));
  EXPECT_EQ(sent.channels[dead].lost, 1u);
  EXPECT_EQ(sent.Total().lost, 1u);
  // Its share of round 2 went again on the others.
  EXPECT_GT(sent.resent_pages, 0u);
  // The others carried rounds 3 and 4; the dead one nothing after round 2
  // (its SYNC of round 2 may count: queued before the failing send).
  EXPECT_LE(sent.channels[dead].syncs, 3u);
  for (uint32_t c = 0; c < kChannels; ++c) {
    if (c != dead) {
      EXPECT_GE(sent.channels[c].syncs, 5u) << c;
    }
  }
  p.FinishIdentical();
  const SessionStats got = p.rx().receiver().stats();
  ASSERT_EQ(LostChannels(got), std::vector<uint32_t>{dead});
  EXPECT_EQ(got.channels_lost[0].round, 2u);
  EXPECT_EQ(got.channels[dead].lost, 1u);
  EXPECT_EQ(got.channels[dead].finishes, 0u);
}

// Deltas against copies the lost channel sent in the round it died in
// would apply to pages the destination never got: those copies are
// forgotten, the re-sent batches go whole, and the end is still exact.
TEST_P(SurviveTest, OneChannelLostMidRoundWithDeltasEndsByteIdentical) {
  if ((channels::StaticCapabilities(GetParam()) &
       channels::kCapRemotePlacement) != 0) {
    GTEST_SKIP() << "rdma places pages itself: no deltas there";
  }
  opt_.delta = Delta::kOn;
  FaultySession p(opt_, ResetOnSend(), 22);
  ASSERT_TRUE(p.connected());
  p.UseSmallStores();
  ASSERT_NO_FATAL_FAILURE(p.SurvivingRounds(6, /*armed=*/3));
  p.SoleLoss();
  const SessionStats sent = p.sender().stats();
  EXPECT_GT(sent.resent_pages, 0u);
  EXPECT_GT(sent.Total().delta_pages, 0u);
  p.FinishIdentical();
}

TEST_P(SurviveTest, WithoutTheOptionBothSidesEndWithAnErrorNamingTheChannel) {
  opt_.survive_channel_loss = false;
  FaultySession p(opt_, ResetOnSend(), 25);
  ASSERT_TRUE(p.connected());
  ASSERT_OK(p.NextRound());
  p.ArmIn(kMidRound);
  const absl::Time start = absl::Now();
  absl::StatusOr<RoundResult> r = p.NextRound();
  ASSERT_TRUE(p.faults().fired());
  const std::string channel =
      absl::StrCat("channel ", p.faults().fired_channel());
  // The channel is gone, on both ends: a reset socket (UNAVAILABLE), or
  // rdma's queue pair, which the source shut down itself (ABORTED) and the
  // destination hears that from it.
  ::testing::Matcher<absl::StatusCode> lost = absl::StatusCode::kUnavailable;
  if (GetParam() == TransportKind::kRdma) {
    lost = AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kAborted);
  }
  ASSERT_THAT(r, StatusIs(lost, AllOf(HasSubstr(channel),
                                      HasSubstr("confirmed 1 round"))));
  absl::Status served = p.rx().result();
  EXPECT_LT(absl::Now() - start, kEndBound);
  EXPECT_THAT(served, StatusIs(lost, HasSubstr(channel)));
  EXPECT_TRUE(p.sender().stats().channels_lost.empty());
  EXPECT_TRUE(p.rx().receiver().stats().channels_lost.empty());
}

TEST_P(SurviveTest, AllChannelsLostEndsBothSidesWithAClearError) {
  FaultPlan plan = ResetOnSend();
  plan.channels = kChannels;
  FaultySession p(opt_, plan, 24);
  ASSERT_TRUE(p.connected());
  ASSERT_OK(p.NextRound());
  p.ArmIn(kMidRound);
  const absl::Time start = absl::Now();
  absl::StatusOr<RoundResult> r = p.NextRound();
  ASSERT_THAT(r, StatusIs(absl::StatusCode::kUnavailable,
                          AllOf(HasSubstr("all 4 channels lost"),
                                HasSubstr("channel 0"), HasSubstr("channel 3"),
                                HasSubstr("confirmed 1 round"))));
  EXPECT_EQ(p.faults().fired_channels().size(), kChannels);
  EXPECT_THAT(p.sender().Finish(), StatusIs(absl::StatusCode::kUnavailable,
                                            HasSubstr("all 4 channels lost")));
  absl::Status served = p.rx().result();
  EXPECT_LT(absl::Now() - start, kEndBound);
  EXPECT_THAT(served, StatusIs(absl::StatusCode::kUnavailable,
                               HasSubstr("channels lost")));
  EXPECT_EQ(p.rx().receiver().applied_rounds(), 1u);
}

TEST_P(SurviveTest, ChannelLostInTheFinalRound) {
  // The migration's last round: sent, then verified and finished with
  // nothing written in between (the workload is paused).
  FaultySession p(opt_, ResetOnSend(), 23);
  ASSERT_TRUE(p.connected());
  ASSERT_NO_FATAL_FAILURE(p.SurvivingRounds(3, /*armed=*/2));
  const uint32_t dead = p.SoleLoss().channel;
  EXPECT_GT(p.sender().stats().resent_pages, 0u);
  p.FinishIdentical();
  EXPECT_EQ(LostChannels(p.rx().receiver().stats()),
            std::vector<uint32_t>{dead});
}

TEST_P(SurviveTest, ChannelLostOnItsFinishPacket) {
  // Every round confirmed; the channel dies sending FINISH: nothing is
  // missing, the session still finishes and reports the loss.
  FaultySession p(opt_, ResetOnSend(), 26);
  ASSERT_TRUE(p.connected());
  for (int round = 0; round < 2; ++round) {
    ASSERT_OK(p.NextRound()) << round;
  }
  p.ArmIn(1);
  p.FinishIdentical();
  const ChannelLoss loss = p.SoleLoss();
  const uint32_t dead = loss.channel;
  const SessionStats sent = p.sender().stats();
  EXPECT_EQ(loss.round, 2u);
  EXPECT_EQ(sent.resent_pages, 0u);
  EXPECT_EQ(p.rx().receiver().stats().channels[dead].finishes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Transports, SurviveTest,
                         ::testing::ValuesIn(testing::TransportsWith(0)),
                         [](const auto& info) {
                           return testing::TestName(info.param);
                         });

// Who notices the death first; tcp only.
class SurviveFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    opt_.channels = kChannels;
    opt_.packet_pages = kPacketPages;
    opt_.survive_channel_loss = true;
    opt_.stall_timeout = absl::Seconds(5);
  }
  SessionOptions opt_ = ::ramferry::testing::InsecureOptions();
};

TEST_F(SurviveFaultTest, OnlyTheDestinationSeesTheDeath) {
  // A receive fails on the destination; the source's sockets are fine:
  // only the destination's CHANNEL_LOST tells it.
  FaultySession p(opt_,
                  {.source = false,
                   .op = FaultOp::kReadPayload,
                   .nth = UINT64_MAX,
                   .kind = FaultKind::kError},
                  31);
  ASSERT_TRUE(p.connected());
  ASSERT_NO_FATAL_FAILURE(p.SurvivingRounds(4, /*armed=*/1));
  const ChannelLoss loss = p.SoleLoss();
  EXPECT_EQ(loss.round, 1u);
  EXPECT_THAT(loss.reason, HasSubstr("destination lost it"));
  p.FinishIdentical();
}

TEST_F(SurviveFaultTest, OnlyTheSourceSeesTheDeath) {
  // A send fails on the source without touching the socket: the
  // destination's end stays open until the source stops it.
  FaultySession p(opt_, ResetOnSend(FaultKind::kShortThenFail), 32);
  ASSERT_TRUE(p.connected());
  ASSERT_NO_FATAL_FAILURE(p.SurvivingRounds(3, /*armed=*/1));
  EXPECT_THAT(p.SoleLoss().reason, HasSubstr("injected fault"));
  p.FinishIdentical();
}

TEST(SurviveOptionsTest, SingleThreadIsRefusedAtStart) {
  auto src = MakeRegion(1, 1 << 20);
  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  opt.survive_channel_loss = true;
  opt.transport = TransportKind::kTcp;
  opt.single_thread = true;
  EXPECT_THAT(
      Sender::Connect(opt, {&src.region, 1}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("single_thread")));
}

// The destination's side of the protocol, spoken by hand.
class ChannelGoneProtocolTest : public ::testing::Test {
 protected:
  ChannelGoneProtocolTest()
      : dst_(MakeRegion(1, 1 << 20)),
        rx_(::ramferry::testing::InsecureOptions(), {dst_.region}),
        src_(rx_.port(), 2) {}
  std::vector<proto::RegionInfo> Table() const {
    return {{1, 4096, 1 << 20, "region-1"}};
  }
  // Opens the session, offering channel-loss survival or not.
  void Open(bool survive = true) {
    if (survive) {
      src_.set_capabilities(proto::kFeatureVerify |
                            proto::kFeatureSurviveChannelLoss);
    }
    ASSERT_OK(src_.OpenControl(Table()));
    ASSERT_OK(src_.OpenAllChannels());
  }
  // How the destination ends after a declaration it must refuse.
  absl::Status Refusal(uint32_t channel, uint64_t round) {
    RAMFERRY_RETURN_IF_ERROR(Gone(channel, round));
    absl::Status s = rx_.result();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    return s;
  }
  absl::Status Gone(uint32_t channel, uint64_t round) {
    return src_.SendControl(proto::EncodeChannelGone(
        {channel, round, static_cast<uint16_t>(absl::StatusCode::kUnavailable),
         "reset"}));
  }
  // The next control messages: CHANNEL_GONE_ACK for `channel` in `round`;
  // ROUND_DONE for `round` with `pages`.
  void ExpectAck(uint32_t channel, uint64_t round) {
    auto ack = src_.ReadControl();
    ASSERT_OK(ack);
    ASSERT_EQ(ack->type, proto::ControlType::kChannelGoneAck);
    auto a = proto::DecodeChannelGoneAck(ack->payload);
    ASSERT_OK(a);
    EXPECT_EQ(a->channel, channel);
    EXPECT_EQ(a->round, round);
  }
  void ExpectRoundDone(uint64_t round, uint64_t pages) {
    auto done = src_.ReadControl();
    ASSERT_OK(done);
    ASSERT_EQ(done->type, proto::ControlType::kRoundDone);
    auto d = proto::DecodeRoundDone(done->payload);
    ASSERT_OK(d);
    EXPECT_EQ(d->round, round);
    EXPECT_EQ(d->pages, pages);
  }
  proto::PacketHeader Data(uint32_t channel, uint64_t packet_num) {
    proto::PacketHeader h;
    h.flags = proto::kPacketData;
    h.channel = channel;
    h.page_count = 1;
    h.packet_num = packet_num;
    h.region_id = 1;
    h.page_size = 4096;
    return h;
  }
  // Page 3, every byte `fill`, as data packet `packet_num` of `channel`.
  absl::Status SendPage3(uint32_t channel, uint64_t packet_num, uint8_t fill) {
    return src_.Send(channel, testing::FakeSource::DataPacket(
                                  Data(channel, packet_num), {3 * 4096}, fill));
  }
  absl::Status SendSync(uint32_t channel, uint64_t packet_num, uint64_t round) {
    return src_.Send(channel,
                     testing::FakeSource::Marker(proto::kPacketSync, channel,
                                                 packet_num, round));
  }
  // After channel 1 (which carried page 3 as 0x11) is gone: page 3 again
  // on channel 0 (0x22) as packet `packet_num`, then the extra SYNC of
  // round 0 a loss calls for. The round completes without channel 1's
  // page.
  void ResendPage3AndCompleteRound0(uint64_t packet_num) {
    ASSERT_OK(SendPage3(0, packet_num, 0x22));
    ASSERT_OK(SendSync(0, packet_num + 1, 0));
    ASSERT_NO_FATAL_FAILURE(ExpectRoundDone(0, 1));
    EXPECT_EQ(dst_.region.page(3)[0], 0x22);
  }
  testing::TestRegion dst_;
  ServingReceiver rx_;
  testing::FakeSource src_;
};

TEST_F(ChannelGoneProtocolTest, RoundCompletesAfterTheExtraSync) {
  ASSERT_NO_FATAL_FAILURE(Open());
  // Channel 1 carried page 3 (0x11) and died; channel 0 got to its SYNC.
  ASSERT_OK(SendPage3(1, 0, 0x11));
  ASSERT_OK(SendSync(0, 0, 0));
  ASSERT_OK(Gone(1, 0));
  ASSERT_NO_FATAL_FAILURE(ExpectAck(1, 0));
  ASSERT_NO_FATAL_FAILURE(ResendPage3AndCompleteRound0(1));
  // Round 1 needs channel 0 only.
  ASSERT_OK(SendSync(0, 3, 1));
  ASSERT_NO_FATAL_FAILURE(ExpectRoundDone(1, 0));
  EXPECT_EQ(rx_.receiver().stats().channels_lost.size(), 1u);
}

// A channel parked at its SYNC (waiting for the others) when the source
// declares it gone, as after a second loss in the round: the removal stops
// it, which is no failure. The destination acknowledges, and the round
// completes on the channel left.
TEST_F(ChannelGoneProtocolTest, AChannelParkedAtItsSyncIsRemovedNotFailed) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_OK(SendPage3(1, 0, 0x11));
  ASSERT_OK(SendSync(1, 1, 0));
  // Channel 1 reached the barrier; channel 0 has sent nothing, so it waits.
  // (The stats list no channel until the receive threads start.)
  auto syncs = [&]() -> uint64_t {
    const SessionStats s = rx_.receiver().stats();
    return s.channels.size() > 1 ? s.channels[1].syncs : 0;
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (syncs() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(syncs(), 1u);
  absl::SleepFor(absl::Milliseconds(50));  // from the count into the wait
  ASSERT_OK(Gone(1, 0));
  ASSERT_NO_FATAL_FAILURE(ExpectAck(1, 0));
  // Channel 0 as the source drives it: its own SYNC of round 0, then
  // channel 1's page again.
  ASSERT_OK(SendSync(0, 0, 0));
  ASSERT_NO_FATAL_FAILURE(ResendPage3AndCompleteRound0(1));
}

TEST_F(ChannelGoneProtocolTest, RefusedWhenNotNegotiated) {
  ASSERT_NO_FATAL_FAILURE(Open(/*survive=*/false));
  EXPECT_THAT(Refusal(1, 0).message(),
              HasSubstr("does not survive channel loss"));
}

TEST_F(ChannelGoneProtocolTest, RefusesAnUnknownChannel) {
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_THAT(Refusal(2, 0).message(),
              HasSubstr("CHANNEL_GONE for channel 2 of 2"));
}

TEST_F(ChannelGoneProtocolTest, RefusesARoundOutOfReach) {
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_THAT(Refusal(0, 5).message(),
              AllOf(HasSubstr("channel 0"), HasSubstr("round 5"),
                    HasSubstr("in round 0")));
}

TEST_F(ChannelGoneProtocolTest, RefusesTheSameChannelTwice) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_OK(Gone(1, 0));
  auto ack = src_.ReadControl();
  ASSERT_OK(ack);
  ASSERT_EQ(ack->type, proto::ControlType::kChannelGoneAck);
  EXPECT_THAT(Refusal(1, 0).message(),
              HasSubstr("channel 1 declared gone twice"));
}

}  // namespace
}  // namespace ramferry
