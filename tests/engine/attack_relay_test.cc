// The attack relay itself, unarmed: between a real Sender and Receiver it
// must be invisible (the migration ends byte-identical, keyed or not) and
// its parser must frame every stream exactly as the two ends did, or the
// attacks it aims at packet N would land somewhere else.
#include "tests/support/attack_relay.h"

#include <random>

#include "channels/transport.h"
#include "gtest/gtest.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/test_support.h"
#include "tests/support/transport_selection.h"

namespace ramferry {
namespace {

using testing::AttackRelay;
using testing::MakeRegion;
using testing::RelayConnection;
using testing::SameBytes;
using testing::ScaledBytes;
using testing::ServingReceiver;

const std::string kKey = "attack relay test key, 32 bytes!";

class AttackRelayTest
    : public ::testing::TestWithParam<std::tuple<TransportKind, bool>> {};

TEST_P(AttackRelayTest, UnarmedRelayIsInvisible) {
  const auto [kind, keyed] = GetParam();
  if (std::string why = testing::WhyUnavailable(kind); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const uint64_t bytes = ScaledBytes(16 << 20);
  auto src = MakeRegion(1, bytes, /*seed=*/5, /*fill=*/true);
  auto dst = MakeRegion(1, bytes);
  SessionOptions opt;
  opt.transport = kind;
  opt.channels = 3;
  opt.stall_timeout = absl::Seconds(5);
  if (keyed) opt.auth_key = kKey;
  ServingReceiver rx(opt, {dst.region});
  AttackRelay relay(rx.port());
  opt.port = relay.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_TRUE(sender.ok()) << sender.status();

  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  std::mt19937_64 rng(3);
  for (int round = 0; round < 3; ++round) {
    if (round > 0) {
      for (int i = 0; i < 300; ++i) {
        const uint64_t p = rng() % src.region.page_count();
        src.region.page(p)[rng() % 4096] ^= 0x11;
        dirty.Set(p);
      }
      // A few all-zero pages: offsets without payload.
      for (uint64_t p = 0; p < 4; ++p) {
        std::fill_n(src.region.page(p * 7), 4096, 0);
        dirty.Set(p * 7);
      }
    }
    absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << relay.Log();
  }
  absl::StatusOr<VerifyReport> v = (*sender)->Verify();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->ok());
  ASSERT_TRUE((*sender)->Finish().ok());
  ASSERT_TRUE(rx.result().ok()) << rx.result();
  EXPECT_TRUE(SameBytes(src.region, dst.region));
  const SessionStats done = (*sender)->stats();
  relay.Stop();

  EXPECT_EQ(relay.fired(), 0u);
  EXPECT_TRUE(relay.events().empty());
  const std::vector<RelayConnection> conns = relay.connections();
  ASSERT_EQ(conns.size(), 1u + opt.channels) << relay.Log();
  int control = 0;
  for (const RelayConnection& c : conns) {
    SCOPED_TRACE(relay.Log());
    EXPECT_TRUE(c.admitted);
    EXPECT_EQ(c.authenticated, keyed);
    EXPECT_FALSE(c.sealed);
    EXPECT_TRUE(c.parse_error.empty()) << c.parse_error;
    EXPECT_TRUE(c.ended_cleanly);
    EXPECT_EQ(c.session, conns[0].session);
    if (c.control) {
      ++control;
      // Region table, verify requests, FINISH at least.
      EXPECT_GE(c.frames, 3u);
      continue;
    }
    ASSERT_LT(c.channel, done.channels.size());
    const ChannelStats& s = done.channels[c.channel];
    EXPECT_EQ(c.syncs, 3u);
    EXPECT_EQ(c.finishes, 1u);
    EXPECT_EQ(c.syncs, s.syncs);
    EXPECT_EQ(c.data_packets, s.packets);
    EXPECT_EQ(c.pages, s.pages);
    EXPECT_EQ(c.zero_ranges, s.zero_range_packets);
    EXPECT_EQ(c.packets, c.data_packets + c.syncs + c.finishes + c.zero_ranges);
  }
  EXPECT_EQ(control, 1);
}

INSTANTIATE_TEST_SUITE_P(
    Transports, AttackRelayTest,
    ::testing::Combine(::testing::ValuesIn(testing::TransportsWith(
                           channels::kCapAuthenticatedHello)),
                       ::testing::Bool()),
    [](const auto& info) {
      return testing::TestName(std::get<0>(info.param)) +
             (std::get<1>(info.param) ? "_keyed" : "_unkeyed");
    });

}  // namespace
}  // namespace ramferry
