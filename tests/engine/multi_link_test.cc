// Channels spread over several destination addresses
// (SessionOptions::channel_endpoints): on two loopback addresses, and over
// two real rate-limited links of a LinkTestbed (root), byte-identical at
// the end, with every channel's endpoint in both ends' stats; and a link
// taken down mid-migration, survived on the other.
#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "engine/endpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/sender.h"
#include "tests/support/link_testbed_skip.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/uffd_skip.h"
#include "tools/common/link_testbed.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;
using testing::MakeRegion;
using testing::SameBytes;
using testing::ServingReceiver;

TEST(ChannelEndpointsTest, ChannelsGoRoundRobinAndPortZeroIsTheSessions) {
  SessionOptions o = testing::InsecureOptions();
  o.host = "10.0.0.2";
  o.port = 7070;
  EXPECT_EQ(engine::ChannelEndpoint(o, 3).host, "10.0.0.2");
  o.channel_endpoints = {{"10.0.0.2", 0}, {"10.0.1.2", 7171}};
  for (uint32_t c = 0; c < 4; ++c) {
    const Endpoint e = engine::ChannelEndpoint(o, c);
    EXPECT_EQ(e.host, c % 2 ? "10.0.1.2" : "10.0.0.2") << c;
    EXPECT_EQ(e.port, c % 2 ? 7171 : 7070) << c;
  }
  EXPECT_EQ(engine::EndpointName("fd00::2", 7070), "[fd00::2]:7070");
  EXPECT_EQ(engine::EndpointName("10.0.0.2", 7070), "10.0.0.2:7070");
}

TEST(ChannelEndpointsTest, AreValidated) {
  SessionOptions o = testing::InsecureOptions();
  o.channels = 2;
  o.channel_endpoints = {{"a", 1}, {"", 2}};
  EXPECT_THAT(ValidateOptions(o).message(),
              HasSubstr("channel_endpoints[1] has no host"));
  o.channel_endpoints = {{"a", 1}, {"b", 1}, {"c", 1}};
  EXPECT_THAT(ValidateOptions(o).message(),
              HasSubstr("3 endpoints for 2 channels"));
  o.channels = 3;
  EXPECT_OK(ValidateOptions(o));
}

// Rewrites every `stride`-th page of `r` and marks it dirty.
void RewritePages(const Region& r, uint64_t stride, uint64_t value,
                  DirtyBitmap& dirty) {
  for (uint64_t p = 0; p < r.page_count(); p += stride) {
    auto* words = reinterpret_cast<uint64_t*>(r.page(p));
    for (size_t w = 0; w < r.page_size / 8; ++w) words[w] = value + w + p;
    dirty.Set(p);
  }
}

// A session of `channels` channels from this thread to `rx`, over
// `addresses` (channel i to addresses[i % size]); three rounds, verified,
// finished. Checks both ends' stats name each channel's address, and that
// each address carried data.
void MigrateOver(const std::vector<std::string>& addresses, uint32_t channels,
                 ServingReceiver& rx, testing::TestRegion& src,
                 testing::TestRegion& dst) {
  SessionOptions opt = testing::InsecureOptions();
  opt.channels = channels;
  opt.host = addresses[0];
  opt.port = rx.port();
  for (const std::string& a : addresses) opt.channel_endpoints.push_back({a});
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  for (int round = 0; round < 3; ++round) {
    if (round > 0) RewritePages(src.region, 7 + round, round, dirty);
    absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
    ASSERT_OK(r);
  }
  absl::StatusOr<VerifyReport> v = (*sender)->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok());
  ASSERT_OK((*sender)->Finish());
  ASSERT_OK(rx.result());
  EXPECT_TRUE(SameBytes(src.region, dst.region));

  const SessionStats sent = (*sender)->stats();
  const SessionStats got = rx.receiver().stats();
  ASSERT_EQ(sent.channels.size(), channels);
  ASSERT_EQ(got.channels.size(), channels);
  std::vector<uint64_t> link_bytes(addresses.size());
  for (uint32_t c = 0; c < channels; ++c) {
    const std::string want =
        engine::EndpointName(addresses[c % addresses.size()], rx.port());
    EXPECT_EQ(sent.channels[c].endpoint, want) << "source, channel " << c;
    // The destination listens on 0.0.0.0: the channel says where it came.
    EXPECT_EQ(got.channels[c].endpoint, want) << "destination, channel " << c;
    link_bytes[c % addresses.size()] += sent.channels[c].payload_bytes;
  }
  for (size_t l = 0; l < addresses.size(); ++l) {
    EXPECT_GT(link_bytes[l], 0u) << addresses[l] << " carried nothing";
  }
  EXPECT_TRUE(sent.Total().endpoint.empty());
}

// Every 127/8 address is this host's loopback: two addresses, no root.
TEST(MultiLinkTest, ChannelsSpreadOverTwoLoopbackAddresses) {
  const uint64_t bytes = testing::ScaledBytes(32ull << 20);
  auto src = MakeRegion(1, bytes, /*seed=*/3, /*fill=*/true);
  auto dst = MakeRegion(1, bytes);
  SessionOptions listen = testing::InsecureOptions();
  listen.host = "0.0.0.0";
  ServingReceiver rx(listen, {dst.region});
  MigrateOver({"127.0.0.1", "127.0.0.2"}, 4, rx, src, dst);
}

// Two real 1gbit links (a LinkTestbed): the receiver serves from the
// destination namespace, the sender runs in the source namespace.
TEST(MultiLinkTest, ChannelsSpreadOverTwoRateLimitedLinks) {
  if (std::string why = testing::LinkTestbedSkipReason(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  cli::SavedNetworkNamespace home;  // this thread goes back at the end
  ASSERT_OK(home);
  absl::StatusOr<std::unique_ptr<cli::LinkTestbed>> bed =
      cli::LinkTestbed::Create({"1gbit", "1gbit"});
  ASSERT_OK(bed);
  const uint64_t bytes = testing::ScaledBytes(48ull << 20);
  auto src = MakeRegion(1, bytes, /*seed=*/5, /*fill=*/true);
  auto dst = MakeRegion(1, bytes);
  // Its listener and its Serve thread are made here, so both are in the
  // destination namespace.
  ASSERT_OK((*bed)->EnterDestination());
  SessionOptions listen = testing::InsecureOptions();
  listen.host = "0.0.0.0";
  ServingReceiver rx(listen, {dst.region});
  ASSERT_OK((*bed)->EnterSource());
  MigrateOver({(*bed)->destination_address(0), (*bed)->destination_address(1)},
              4, rx, src, dst);
}

// A source of 4 channels to a destination behind two links of `rate`
// each: channels 0 and 2 over link 0, which also carries the control
// connection and stays up, channels 1 and 3 over link 1, which the tests
// take down. Both ends in the testbed's namespaces; `src` and `dst` of
// `bytes` each.
struct TwoLinkSession {
  explicit TwoLinkSession(const std::string& rate, uint64_t bytes,
                          uint64_t seed)
      : src(MakeRegion(1, bytes, seed, /*fill=*/true)),
        dst(MakeRegion(1, bytes)) {
    bed = cli::LinkTestbed::Create({rate, rate});
  }

  // Connects with `opt` (channels, host, port and endpoints set here).
  absl::Status Connect(SessionOptions opt) {
    if (!bed.ok()) return bed.status();
    opt.channels = 4;
    opt.host = "0.0.0.0";
    RAMFERRY_RETURN_IF_ERROR((*bed)->EnterDestination());
    rx = std::make_unique<ServingReceiver>(opt, std::vector{dst.region});
    RAMFERRY_RETURN_IF_ERROR((*bed)->EnterSource());
    opt.host = (*bed)->destination_address(0);
    opt.port = rx->port();
    opt.channel_endpoints = {{(*bed)->destination_address(0)},
                             {(*bed)->destination_address(1)}};
    absl::StatusOr<std::unique_ptr<Sender>> s =
        Sender::Connect(opt, {&src.region, 1});
    if (!s.ok()) return s.status();
    sender = *std::move(s);
    dirty = std::make_unique<DirtyBitmap>(src.region.page_count());
    dirty->SetAll();
    return absl::OkStatus();
  }

  absl::StatusOr<RoundResult> SendRound() {
    DirtyBitmap* bitmaps[] = {dirty.get()};
    return sender->SendRound(bitmaps);
  }

  // The session goes on over link 0: verified, finished, byte-identical,
  // with link 1's channels (1 and 3) lost, each for a reason that says
  // `lost_because`, and their share re-sent.
  void ExpectFinishedOverLinkZero(const std::string& lost_because) {
    absl::StatusOr<VerifyReport> v = sender->Verify();
    ASSERT_OK(v);
    EXPECT_TRUE(v->ok()) << v->pages_mismatched << " pages differ";
    ASSERT_OK(sender->Finish());
    ASSERT_OK(rx->result());
    EXPECT_TRUE(SameBytes(src.region, dst.region));
    const SessionStats sent = sender->stats();
    ASSERT_EQ(sent.channels_lost.size(), 2u)
        << DescribeChannelLosses(sent.channels_lost);
    for (const ChannelLoss& l : sent.channels_lost) {
      EXPECT_EQ(l.channel % 2, 1u) << DescribeChannelLosses(sent.channels_lost);
      EXPECT_THAT(l.reason, HasSubstr(lost_because));
    }
    EXPECT_GT(sent.resent_pages, 0u);
  }

  cli::SavedNetworkNamespace home;  // first: restored last
  absl::StatusOr<std::unique_ptr<cli::LinkTestbed>> bed;
  testing::TestRegion src;
  testing::TestRegion dst;
  std::unique_ptr<ServingReceiver> rx;
  std::unique_ptr<Sender> sender;
  std::unique_ptr<DirtyBitmap> dirty;
};

// Link 1 taken down mid-round (`ip link set down`): its channels stall,
// the destination reports them lost after the stall timeout, and with
// survive_channel_loss the round's share of them goes again over link 0.
// The session finishes, verified, byte-identical, naming the lost ones.
TEST(MultiLinkTest, ALinkTakenDownMidMigrationFinishesOnTheOther) {
  if (std::string why = testing::LinkTestbedSkipReason(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  TwoLinkSession t("200mbit", testing::ScaledBytes(32ull << 20), /*seed=*/9);
  ASSERT_OK(t.home);
  SessionOptions opt = testing::InsecureOptions();
  opt.survive_channel_loss = true;
  opt.stall_timeout = absl::Seconds(2);
  ASSERT_OK(t.Connect(opt));
  // 32 MiB over 2 x 200mbit takes about 0.7 s: the link goes down a third
  // of the way in, with both of its channels mid-stream.
  std::thread cut([&] {
    absl::SleepFor(absl::Milliseconds(250));
    EXPECT_OK((*t.bed)->SetLinkUp(1, false));
  });
  absl::StatusOr<RoundResult> r = t.SendRound();
  cut.join();
  ASSERT_OK(r);
  RewritePages(t.src.region, 5, 77, *t.dirty);
  ASSERT_OK(t.SendRound());
  ASSERT_NO_FATAL_FAILURE(t.ExpectFinishedOverLinkZero(""));
}

// Link 1 taken down between rounds: each of its channels hands all of the
// next round, down to its SYNC, to the kernel and has nothing more to
// send. No send blocks and the destination waits at a packet boundary,
// where a peer may idle: only the source's idle channels can see that
// their bytes stand still. With survive_channel_loss the round goes on
// over link 0 and ends verified; without it both ends fail with the cause.
// Before the idle channels watched their bytes this hung for good.
class IdleLinkLossTest : public ::testing::TestWithParam<bool> {};

TEST_P(IdleLinkLossTest, ALinkDownBetweenRoundsIsSeenByItsIdleChannels) {
  if (std::string why = testing::LinkTestbedSkipReason(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const bool survive = GetParam();
  TwoLinkSession t("1gbit", testing::ScaledBytes(4ull << 20), /*seed=*/11);
  ASSERT_OK(t.home);
  SessionOptions opt = testing::InsecureOptions();
  opt.survive_channel_loss = survive;
  opt.stall_timeout = absl::Seconds(1);
  ASSERT_OK(t.Connect(opt));
  ASSERT_OK(t.SendRound());
  ASSERT_OK((*t.bed)->SetLinkUp(1, false));
  RewritePages(t.src.region, 5, 42, *t.dirty);
  absl::StatusOr<RoundResult> r = t.SendRound();
  if (!survive) {
    EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
    EXPECT_THAT(r.status().message(),
                HasSubstr("the link or the peer is down"));
    EXPECT_THAT(t.rx->result(),
                StatusIs(absl::StatusCode::kDeadlineExceeded,
                         HasSubstr("for the peer to take them")))
        << "the destination reported success";
    return;
  }
  ASSERT_OK(r);
  ASSERT_NO_FATAL_FAILURE(
      t.ExpectFinishedOverLinkZero("the link or the peer is down"));
}

INSTANTIATE_TEST_SUITE_P(Survive, IdleLinkLossTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "SurvivesOnTheOtherLink"
                                          : "EndsBothEndsWithTheCause";
                         });

// Post-copy over a real link that goes down mid-way: both ends see their
// connections stall and fail; the destination keeps its faulting threads
// blocked and waits; once the link is back the source resumes the session
// and the destination ends byte-identical, every thread having read the
// source's bytes.
TEST(MultiLinkTest, PostcopyCutByALinkDownIsResumedWhenItReturns) {
  for (const std::string& why :
       {testing::LinkTestbedSkipReason(), testing::UserfaultfdSkipReason()}) {
    if (!why.empty()) GTEST_SKIP() << why;
  }
  cli::SavedNetworkNamespace home;
  ASSERT_OK(home);
  absl::StatusOr<std::unique_ptr<cli::LinkTestbed>> bed =
      cli::LinkTestbed::Create({"200mbit"});
  ASSERT_OK(bed);
  const uint64_t bytes = testing::ScaledBytes(32ull << 20);
  auto src = MakeRegion(1, bytes, /*seed=*/4, /*fill=*/true);
  auto dst = MakeRegion(1, bytes);
  SessionOptions opt = testing::InsecureOptions();
  opt.postcopy = true;
  opt.stall_timeout = absl::Seconds(1);
  opt.postcopy_resume_timeout = absl::Seconds(20);
  opt.host = "0.0.0.0";
  ASSERT_OK((*bed)->EnterDestination());
  ServingReceiver rx(opt, {dst.region});
  ASSERT_OK((*bed)->EnterSource());
  opt.host = (*bed)->destination_address(0);
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);
  DirtyBitmap missing(src.region.page_count());
  missing.SetAll();
  DirtyBitmap* bitmaps[] = {&missing};
  ASSERT_OK((*sender)->StartPostcopy(bitmaps));
  // A thread of the destination's workload touches every page in turn.
  std::atomic<uint64_t> differing{0};
  std::thread workload([&] {
    std::vector<uint8_t> page(4096);
    for (uint64_t p = 0; p < dst.region.page_count(); p += 3) {
      std::memcpy(page.data(), dst.region.page(p), page.size());
      if (std::memcmp(page.data(), src.region.page(p), page.size()) != 0) {
        differing.fetch_add(1);
      }
    }
  });
  std::thread cut([&] {
    absl::SleepFor(absl::Milliseconds(400));
    EXPECT_OK((*bed)->SetLinkUp(0, false));
  });
  absl::Status first = (*sender)->CompletePostcopy();
  cut.join();
  EXPECT_THAT(first,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("no control message, not even a heartbeat")))
      << "the link went down and nothing failed";
  ASSERT_OK((*bed)->SetLinkUp(0, true));
  auto resumed = Sender::ResumePostcopy(opt, {&src.region, 1}, **sender);
  ASSERT_OK(resumed);
  absl::Status done = (*resumed)->CompletePostcopy();
  workload.join();
  ASSERT_OK(done);
  EXPECT_EQ(differing.load(), 0u);
  absl::StatusOr<VerifyReport> v = (*resumed)->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok()) << v->pages_mismatched << " pages differ";
  ASSERT_OK((*resumed)->Finish());
  ASSERT_OK(rx.result());
  EXPECT_TRUE(SameBytes(src.region, dst.region));
  EXPECT_EQ(rx.receiver().stats().postcopy.resumes, 1u);
}

}  // namespace
}  // namespace ramferry
