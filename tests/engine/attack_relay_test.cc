// The attack relay itself, unarmed: between a real Sender and Receiver it
// must be invisible (the migration ends byte-identical, keyed or not) and
// its parser must frame every stream exactly as the two ends did, or the
// attacks it aims at packet N would land somewhere else.
#include "tests/support/attack_relay.h"

#include <sys/socket.h>
#include <unistd.h>

#include <random>

#include "absl/time/clock.h"
#include "channels/socket_dial.h"
#include "channels/transport.h"
#include "gtest/gtest.h"
#include "proto/control.h"
#include "proto/handshake.h"
#include "proto/wire.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/transport_selection.h"

namespace ramferry {
namespace {

using testing::Attack;
using testing::AttackKind;
using testing::AttackRelay;
using testing::MakeRegion;
using testing::RelayConnection;
using testing::SameBytes;
using testing::ScaledBytes;
using testing::ServingReceiver;

const std::string kKey = "attack relay test key, 32 bytes!";

// How the session guards itself: no key at all, or a key and each
// protection of the stream.
enum class Guard { kUnkeyed, kKeyed, kMac, kEncrypt };

std::string GuardName(Guard g) {
  switch (g) {
    case Guard::kUnkeyed:
      return "unkeyed";
    case Guard::kKeyed:
      return "keyed";
    case Guard::kMac:
      return "mac";
    case Guard::kEncrypt:
      return "encrypt";
  }
  return "?";
}

void PrintTo(Guard g, std::ostream* os) { *os << GuardName(g); }

class AttackRelayTest
    : public ::testing::TestWithParam<std::tuple<TransportKind, Guard>> {};

TEST_P(AttackRelayTest, UnarmedRelayIsInvisible) {
  const auto [kind, guard] = GetParam();
  const bool keyed = guard != Guard::kUnkeyed;
  const bool sealed = guard == Guard::kMac || guard == Guard::kEncrypt;
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
  if (keyed) {
    opt.auth_key = kKey;
  } else {
    opt.insecure = true;
  }
  opt.protect = guard == Guard::kMac       ? Protection::kMac
                : guard == Guard::kEncrypt ? Protection::kEncrypt
                                           : Protection::kNone;
  ServingReceiver rx(opt, {dst.region});
  AttackRelay relay(rx.port());
  opt.port = relay.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);

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
    ASSERT_OK(r) << relay.Log();
  }
  absl::StatusOr<VerifyReport> v = (*sender)->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok());
  ASSERT_OK((*sender)->Finish());
  ASSERT_OK(rx.result());
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
    EXPECT_EQ(c.sealed, sealed);
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
    // The relay speaks TCP: the families that run on a stream socket.
    ::testing::Combine(::testing::ValuesIn(testing::TransportsWith(
                           0, channels::kCapOwnsConnection)),
                       ::testing::Values(Guard::kUnkeyed, Guard::kKeyed,
                                         Guard::kMac, Guard::kEncrypt)),
    [](const auto& info) {
      return testing::TestName(std::get<0>(info.param)) + "_" +
             GuardName(std::get<1>(info.param));
    });

// A protected session's control frames each carry a tag after their
// payload, outside the length: the relay must frame them so, or it would
// aim at the wrong frame. Hand-driven ends, so it needs no protection in
// the engine.
TEST(AttackRelayFramingTest, SealedControlFramesCarryTheirTags) {
  auto [listen_fd, port] = testing::ListenOnLoopback(1);
  AttackRelay relay(port);
  Attack flood;
  flood.kind = AttackKind::kFloodHeartbeats;
  flood.control = true;
  flood.at_index = 1;
  flood.count = 10;
  relay.Arm(flood);
  const int src = testing::ConnectToLoopback(relay.port());
  ASSERT_GE(src, 0);
  const int dst = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(dst, 0);
  close(listen_fd);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);

  proto::Hello hello;
  hello.role = proto::Role::kControl;
  hello.session.bytes[0] = 7;
  hello.capabilities = testing::kSealedFeatureBits;
  uint8_t out[proto::kHelloBytes], in[proto::kHelloBytes];
  proto::EncodeHello(hello, absl::MakeSpan(out));
  ASSERT_OK(channels::WriteWithDeadline(src, out, deadline));
  ASSERT_OK(channels::ReadWithDeadline(dst, absl::MakeSpan(in), deadline));
  EXPECT_TRUE(std::equal(out, out + sizeof out, in));
  uint8_t reply[proto::kHelloReplyBytes], got[proto::kHelloReplyBytes];
  proto::EncodeHelloReply({0, 1ull << 9, ""}, absl::MakeSpan(reply));
  ASSERT_OK(channels::WriteWithDeadline(dst, reply, deadline));
  ASSERT_OK(channels::ReadWithDeadline(src, absl::MakeSpan(got), deadline));

  // Three frames, each with a 16-byte tag; the middle one has a payload.
  auto sealed = [](std::vector<uint8_t> frame, uint8_t tag) {
    frame.insert(frame.end(), testing::kControlTagBytes, tag);
    return frame;
  };
  std::vector<uint8_t> first = sealed(proto::EncodeHeartbeat(), 0x11);
  std::vector<uint8_t> second =
      sealed(proto::EncodeRoundDone({3, 4}), 0x22);  // any type frames alike
  std::vector<uint8_t> third = sealed(proto::EncodeFinish(), 0x33);
  std::vector<uint8_t> stream;
  for (const auto* f : {&first, &second, &third}) {
    stream.insert(stream.end(), f->begin(), f->end());
  }
  ASSERT_OK(channels::WriteWithDeadline(src, stream, deadline));
  shutdown(src, SHUT_WR);

  std::vector<uint8_t> arrived;
  uint8_t buf[4096];
  while (true) {
    ssize_t n = recv(dst, buf, sizeof buf, 0);
    if (n <= 0) break;
    arrived.insert(arrived.end(), buf, buf + n);
  }
  close(src);
  close(dst);
  relay.Stop();

  // The flood came after the second frame, as whole tagged heartbeats.
  const size_t beat = proto::kFrameHeaderBytes + testing::kControlTagBytes;
  ASSERT_EQ(arrived.size(), stream.size() + 10 * beat);
  size_t at = 0;
  EXPECT_TRUE(std::equal(first.begin(), first.end(), arrived.begin() + at));
  at += first.size();
  EXPECT_TRUE(std::equal(second.begin(), second.end(), arrived.begin() + at));
  at += second.size();
  for (int i = 0; i < 10; ++i, at += beat) {
    EXPECT_EQ(proto::Load32(&arrived[at]),
              static_cast<uint32_t>(proto::ControlType::kHeartbeat));
    EXPECT_EQ(proto::Load32(&arrived[at + 4]), 0u);
  }
  EXPECT_TRUE(std::equal(third.begin(), third.end(), arrived.begin() + at));

  EXPECT_EQ(relay.fired(), 1u);
  const std::vector<testing::RelayConnection> conns = relay.connections();
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_TRUE(conns[0].control);
  EXPECT_TRUE(conns[0].admitted);
  EXPECT_TRUE(conns[0].sealed);
  EXPECT_EQ(conns[0].frames, 3u);
  EXPECT_TRUE(conns[0].ended_cleanly);
  EXPECT_TRUE(conns[0].parse_error.empty()) << conns[0].parse_error;
}

}  // namespace
}  // namespace ramferry
