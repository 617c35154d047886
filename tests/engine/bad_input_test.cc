// Hostile or broken input from the network, fed by hand to a real Receiver:
// every case ends the session with an error that names the channel and the
// reason, and nothing is written to the region (whose guard pages would
// turn a stray write into a crash).
#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_source.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry {
namespace {

using testing::AllZero;
using testing::FakeSource;
using ::testing::HasSubstr;
using testing::MakeRegion;
using testing::ServingReceiver;

constexpr uint64_t kRegionBytes = 1 << 20;
constexpr uint32_t kMaxPages = 128;

std::vector<proto::RegionInfo> Table() {
  return {{1, 4096, kRegionBytes, "region-1"}};
}

proto::PacketHeader Data(uint32_t channel, uint64_t num, uint32_t pages) {
  proto::PacketHeader h;
  h.channel = channel;
  h.packet_num = num;
  h.round = 0;
  h.region_id = 1;
  h.page_size = 4096;
  h.page_count = pages;
  return h;
}

std::vector<uint64_t> Offsets(uint32_t n, uint64_t first = 0) {
  std::vector<uint64_t> o(n);
  for (uint32_t i = 0; i < n; ++i) o[i] = first + 4096ull * i;
  return o;
}

struct BadPacket {
  std::string name;
  std::function<std::vector<uint8_t>()> bytes;  // sent on channel 1
  absl::StatusCode code;
  std::string says;
};

// Test names in ctest's listing, instead of a byte dump.
void PrintTo(const BadPacket& b, std::ostream* os) { *os << b.name; }

std::vector<BadPacket> Cases() {
  auto valid = [] {
    return FakeSource::DataPacket(Data(1, 0, 2), Offsets(2), 0xab);
  };
  auto patched = [valid](size_t at, uint8_t v) {
    return [=] {
      auto b = valid();
      b[at] = v;
      return b;
    };
  };
  auto with = [](std::function<void(proto::PacketHeader&)> edit,
                 std::vector<uint64_t> offsets) {
    return [=] {
      proto::PacketHeader h = Data(1, 0, static_cast<uint32_t>(offsets.size()));
      edit(h);
      return FakeSource::DataPacket(h, offsets, 0xab);
    };
  };
  auto none = [](proto::PacketHeader&) {};
  // A header (flags `flags`, `words` after the fixed part) and then
  // `payload` bytes of junk.
  auto raw = [](uint16_t flags, std::vector<uint64_t> words,
                uint32_t compressed_bytes, size_t payload) {
    return [=] {
      proto::PacketHeader h = Data(1, 0, static_cast<uint32_t>(words.size()));
      h.flags = flags;
      h.compressed_bytes = compressed_bytes;
      if (flags == proto::kPacketSync)
        h.page_count = h.region_id = h.page_size = 0;
      std::vector<uint8_t> b(proto::PacketHeaderBytes(h.page_count));
      proto::EncodePacketHeader(h, words, absl::MakeSpan(b));
      b.insert(b.end(), payload, 0x5c);
      return b;
    };
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const uint16_t kRanges = proto::kPacketZeroRanges;
  return {
      {"BadMagic", patched(0, 'X'), kInvalid, "magic"},
      {"BadVersion", patched(5, 9), kInvalid, "version"},
      {"UnknownFlag", patched(7, 0x80), kInvalid, "flags"},
      {"ReservedByteSet", patched(50, 1), kInvalid, "reserved"},
      {"TooManyPages",
       with([](auto& h) { h.page_count = kMaxPages + 1; },
            Offsets(kMaxPages + 1)),
       kInvalid, "page_count 129"},
      {"OffsetPastRegion", with(none, {0, kRegionBytes}),
       absl::StatusCode::kOutOfRange, "outside region 1"},
      {"OffsetOverflows", with(none, {~uint64_t{4095}}),
       absl::StatusCode::kOutOfRange, "outside region 1"},
      {"OffsetMisaligned", with(none, {4095}), kInvalid, "not aligned"},
      {"UnknownRegion", with([](auto& h) { h.region_id = 99; }, Offsets(1)),
       kInvalid, "unknown region id 99"},
      {"PageSizeMismatch", with([](auto& h) { h.page_size = 8192; }, {0}),
       kInvalid, "page size 8192"},
      {"WrongChannel", with([](auto& h) { h.channel = 0; }, Offsets(1)),
       kInvalid, "names channel 0"},
      {"WrongPacketNumber", with([](auto& h) { h.packet_num = 5; }, Offsets(1)),
       kInvalid, "packet number 5, expected 0"},
      {"WrongRound", with([](auto& h) { h.round = 3; }, Offsets(1)), kInvalid,
       "round 3"},
      {"SyncWithPages",
       with([](auto& h) { h.flags = proto::kPacketSync; }, Offsets(1)),
       kInvalid, "SYNC packet carries"},
      {"SyncForFutureRound",
       [] { return FakeSource::Marker(proto::kPacketSync, 1, 0, 4); }, kInvalid,
       "round 4"},
      // kFeatureZeroPages: zero pages and ranges are checked like offsets.
      {"ZeroPageFlagPastRegion",
       raw(proto::kPacketData, {kRegionBytes | proto::kZeroPageFlag}, 0, 0),
       absl::StatusCode::kOutOfRange, "outside region 1"},
      {"ZeroRangePastRegion", raw(kRanges, {kRegionBytes - 4096, 8192}, 0, 0),
       absl::StatusCode::kOutOfRange, "outside region 1"},
      {"ZeroRangeLengthWraps", raw(kRanges, {4096, ~uint64_t{4095}}, 0, 0),
       absl::StatusCode::kOutOfRange, "outside region 1"},
      {"ZeroRangesOverlap", raw(kRanges, {0, 8192, 4096, 4096}, 0, 0), kInvalid,
       "ranges must ascend"},
      {"ZeroRangesOddWordCount", raw(kRanges, {0, 4096, 8192}, 0, 0), kInvalid,
       "even count"},
      {"ZeroRangeEmpty", raw(kRanges, {4096, 0}, 0, 0), kInvalid,
       "empty or not aligned"},
      // kFeatureCompressedPages: a frame's length and contents are checked
      // before and while it expands.
      {"CompressedNotSmallerThanItsPages",
       raw(proto::kPacketData, Offsets(2), 8192, 8192), kInvalid,
       "want fewer than the pages"},
      {"CompressedOverTheBound",
       raw(proto::kPacketData, Offsets(2), proto::kMaxCompressedBytes + 1, 0),
       kInvalid, "at most"},
      {"CompressedJunk", raw(proto::kPacketData, Offsets(2), 100, 100 + 64),
       kInvalid, "not a frame"},
      {"CompressedOnASync", raw(proto::kPacketSync, {}, 100, 0), kInvalid,
       "only a data packet may"},
  };
}

class BadPacketTest : public ::testing::TestWithParam<BadPacket> {};

TEST_P(BadPacketTest, EndsSessionWithClearErrorAndNoWrite) {
  auto dst = MakeRegion(1, kRegionBytes);
  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  opt.channels = 2;
  ServingReceiver rx(opt, {dst.region});
  FakeSource src(rx.port(), 2, kMaxPages);
  {
    absl::Status open = src.OpenControl(Table());
    ASSERT_OK(open);
  }
  ASSERT_OK(src.OpenAllChannels());
  // The receiver may reset the connection before all of it is sent.
  (void)src.Send(1, GetParam().bytes());

  absl::Status s = rx.result();
  EXPECT_EQ(s.code(), GetParam().code) << s;
  EXPECT_THAT(s.message(), HasSubstr("channel 1"));
  EXPECT_THAT(s.message(), HasSubstr(GetParam().says));
  EXPECT_TRUE(AllZero(dst.region));

  // The source hears why.
  absl::StatusOr<engine::ControlChannel::Message> m = src.ReadControl();
  ASSERT_OK(m);
  ASSERT_EQ(m->type, proto::ControlType::kError);
  absl::StatusOr<proto::ErrorMessage> e = proto::DecodeError(m->payload);
  ASSERT_OK(e);
  EXPECT_THAT(e->text, HasSubstr(GetParam().says));
}

INSTANTIATE_TEST_SUITE_P(Wire, BadPacketTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

class HandshakeTest : public ::testing::Test {
 protected:
  HandshakeTest()
      : dst_(MakeRegion(1, kRegionBytes)),
        rx_(Options(), {dst_.region}),
        src_(rx_.port(), 2, kMaxPages) {}
  static SessionOptions Options() {
    SessionOptions opt = ::ramferry::testing::InsecureOptions();
    opt.channels = 2;
    opt.max_channels = 4;
    return opt;
  }
  // Completes one round and FINISH by hand: the session still works.
  void FinishCleanly() { FinishCleanly(src_); }
  void FinishCleanly(FakeSource& src) {
    for (uint32_t c = 0; c < 2; ++c) {
      ASSERT_OK(src.Send(c, FakeSource::DataPacket(
                                Data(c, 0, 1), Offsets(1, 4096 * c), 0x5a)));
      ASSERT_OK(src.Send(c, FakeSource::Marker(proto::kPacketSync, c, 1, 0)));
    }
    auto m = src.ReadControl();
    ASSERT_OK(m);
    ASSERT_EQ(m->type, proto::ControlType::kRoundDone);
    auto done = proto::DecodeRoundDone(m->payload);
    ASSERT_OK(done);
    EXPECT_EQ(done->round, 0u);
    EXPECT_EQ(done->pages, 2u);
    for (uint32_t c = 0; c < 2; ++c) {
      ASSERT_OK(src.Send(c, FakeSource::Marker(proto::kPacketFinish, c, 2, 1)));
    }
    ASSERT_OK(src.SendControl(proto::EncodeFinish()));
    m = src.ReadControl();
    ASSERT_OK(m);
    EXPECT_EQ(m->type, proto::ControlType::kFinishAck);
    EXPECT_OK(rx_.result());
    EXPECT_EQ(static_cast<uint8_t*>(dst_.region.base)[4096], 0x5a);
  }

  testing::TestRegion dst_;
  ServingReceiver rx_;
  FakeSource src_;
};

TEST_F(HandshakeTest, DataChannelBeforeControlIsRefused) {
  auto fd = src_.Connect(src_.MakeHello(proto::Role::kData, 0));
  EXPECT_TRUE(absl::IsFailedPrecondition(fd.status())) << fd.status();
  EXPECT_THAT(fd.status().message(),
              HasSubstr("control connection comes first"));
}

TEST_F(HandshakeTest, ForeignSessionIsRefusedAndSessionGoesOn) {
  ASSERT_OK(src_.OpenControl(Table()));
  proto::Hello h = src_.MakeHello(proto::Role::kData, 0);
  h.session.bytes[0] ^= 1;
  auto fd = src_.Connect(h);
  EXPECT_TRUE(absl::IsPermissionDenied(fd.status())) << fd.status();
  ASSERT_OK(src_.OpenAllChannels());
  FinishCleanly();
}

TEST_F(HandshakeTest, DuplicateChannelIndexIsRefused) {
  ASSERT_OK(src_.OpenControl(Table()));
  ASSERT_OK(src_.OpenChannel(0));
  auto fd = src_.Connect(src_.MakeHello(proto::Role::kData, 0));
  EXPECT_TRUE(absl::IsAlreadyExists(fd.status())) << fd.status();
  EXPECT_THAT(fd.status().message(),
              HasSubstr("channel 0 is already connected"));
  ASSERT_OK(src_.OpenChannel(1));
  FinishCleanly();
}

TEST_F(HandshakeTest, ChannelCountMismatchIsRefused) {
  ASSERT_OK(src_.OpenControl(Table()));
  proto::Hello h = src_.MakeHello(proto::Role::kData, 0);
  h.channel_count = 3;
  auto fd = src_.Connect(h);
  EXPECT_TRUE(absl::IsInvalidArgument(fd.status())) << fd.status();
  EXPECT_THAT(fd.status().message(), HasSubstr("channel count 3"));
}

TEST_F(HandshakeTest, SecondControlConnectionIsRefused) {
  ASSERT_OK(src_.OpenControl(Table()));
  auto fd = src_.Connect(src_.MakeHello(proto::Role::kControl, 0));
  EXPECT_TRUE(absl::IsResourceExhausted(fd.status())) << fd.status();
}

TEST_F(HandshakeTest, TooManyChannelsIsRefused) {
  FakeSource greedy(rx_.port(), 5, kMaxPages);
  auto fd = greedy.Connect(greedy.MakeHello(proto::Role::kControl, 0));
  EXPECT_TRUE(absl::IsInvalidArgument(fd.status())) << fd.status();
  EXPECT_THAT(fd.status().message(), HasSubstr("at most 4"));
}

TEST_F(HandshakeTest, GarbageHelloIsRefusedWithTheReason) {
  proto::Hello h = src_.MakeHello(proto::Role::kControl, 0);
  h.channel_index = 7;  // >= channel_count: the decoder refuses it
  auto fd = src_.Connect(h);
  EXPECT_TRUE(absl::IsInvalidArgument(fd.status())) << fd.status();
  EXPECT_THAT(fd.status().message(), HasSubstr("channel index 7"));
}

// Waits until the destination gave up `n` sessions in all.
void AwaitAbandoned(Receiver& r, uint64_t n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (r.stats().sessions_abandoned < n && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(r.stats().sessions_abandoned, n) << r.stats().last_abandoned;
}

// Nothing a session does before its channels start ends a destination
// waiting for its real source: the session is given up, and the next one
// is served.
TEST_F(HandshakeTest, RegionTableMismatchIsRefusedAndTheNextSourceServed) {
  auto bad = Table();
  bad[0].length *= 2;
  absl::Status s = src_.OpenControl(bad);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("region 1"));
  ASSERT_NO_FATAL_FAILURE(AwaitAbandoned(rx_.receiver(), 1));
  EXPECT_THAT(rx_.receiver().stats().last_abandoned,
              HasSubstr("refused the source's region table"));
  EXPECT_FALSE(rx_.done());
  FakeSource real(rx_.port(), 2, kMaxPages);
  ASSERT_OK(real.OpenControl(Table()));
  ASSERT_OK(real.OpenAllChannels());
  FinishCleanly(real);
}

TEST_F(HandshakeTest, AControlConnectionThatDiesBeforeItsTableIsGivenUp) {
  {
    FakeSource bogus(rx_.port(), 2, kMaxPages);
    ASSERT_OK(bogus.Connect(bogus.MakeHello(proto::Role::kControl, 0)));
  }  // closed with its table unsent
  ASSERT_NO_FATAL_FAILURE(AwaitAbandoned(rx_.receiver(), 1));
  FakeSource real(rx_.port(), 2, kMaxPages);
  ASSERT_OK(real.OpenControl(Table()));
  ASSERT_OK(real.OpenAllChannels());
  FinishCleanly(real);
}

TEST_F(HandshakeTest, ASessionWhoseChannelsNeverComeIsGivenUp) {
  SessionOptions opt = Options();
  opt.handshake_timeout = absl::Milliseconds(300);
  auto dst = MakeRegion(1, kRegionBytes);
  ServingReceiver rx(opt, {dst.region});
  FakeSource bogus(rx.port(), 2, kMaxPages);
  ASSERT_OK(bogus.OpenControl(Table()));
  ASSERT_OK(bogus.OpenChannel(0));  // channel 1 never comes
  ASSERT_NO_FATAL_FAILURE(AwaitAbandoned(rx.receiver(), 1));
  EXPECT_THAT(rx.receiver().stats().last_abandoned,
              HasSubstr("only 1 of 2 data channels"));
  FakeSource real(rx.port(), 2, kMaxPages);
  ASSERT_OK(real.OpenControl(Table()));
  ASSERT_OK(real.OpenAllChannels());
  rx.receiver().Abort(absl::CancelledError("test over"));
  EXPECT_TRUE(absl::IsCancelled(rx.result())) << rx.result();
  EXPECT_TRUE(testing::AllZero(dst.region));
}

TEST_F(HandshakeTest, ChannelClosedMidPacketEndsTheSession) {
  ASSERT_OK(src_.OpenControl(Table()));
  ASSERT_OK(src_.OpenAllChannels());
  auto packet = FakeSource::DataPacket(Data(1, 0, 4), Offsets(4), 0x77);
  packet.resize(packet.size() / 2);
  ASSERT_OK(src_.Send(1, packet));
  src_.CloseChannel(1);
  absl::Status s = rx_.result();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("channel 1"));
  EXPECT_THAT(s.message(), HasSubstr("closed by peer mid-packet"));
}

TEST_F(HandshakeTest, ChannelClosedBetweenPacketsWithoutFinishEndsTheSession) {
  ASSERT_OK(src_.OpenControl(Table()));
  ASSERT_OK(src_.OpenAllChannels());
  src_.CloseChannel(0);
  absl::Status s = rx_.result();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("channel 0"));
  EXPECT_THAT(s.message(), HasSubstr("before FINISH"));
}

// A page re-sent in round 1 on one channel must not be overwritten by its
// stale round-0 copy that arrives later on another channel.
TEST_F(HandshakeTest, RoundBarrierOrdersRewritesAcrossChannels) {
  ASSERT_OK(src_.OpenControl(Table()));
  ASSERT_OK(src_.OpenAllChannels());
  const std::vector<uint64_t> page5 = {5 * 4096};
  // Channel 0 finishes round 0 early and sends the new copy of page 5.
  ASSERT_OK(src_.Send(0, FakeSource::Marker(proto::kPacketSync, 0, 0, 0)));
  proto::PacketHeader fresh = Data(0, 1, 1);
  fresh.round = 1;
  ASSERT_OK(src_.Send(0, FakeSource::DataPacket(fresh, page5, 0x22)));
  // Give channel 0 every chance to apply it out of order (the outcome may
  // not depend on this pause: the barrier must hold either way).
  absl::SleepFor(absl::Milliseconds(50));
  // The stale round-0 copy arrives late on channel 1.
  ASSERT_OK(src_.Send(1, FakeSource::DataPacket(Data(1, 0, 1), page5, 0x11)));
  ASSERT_OK(src_.Send(1, FakeSource::Marker(proto::kPacketSync, 1, 1, 0)));
  auto m = src_.ReadControl();
  ASSERT_TRUE(m.ok() && m->type == proto::ControlType::kRoundDone);
  for (uint32_t c = 0; c < 2; ++c) {
    ASSERT_OK(src_.Send(c, FakeSource::Marker(proto::kPacketSync, c, 2, 1)));
  }
  m = src_.ReadControl();
  ASSERT_TRUE(m.ok() && m->type == proto::ControlType::kRoundDone);
  auto done = proto::DecodeRoundDone(m->payload);
  ASSERT_OK(done);
  EXPECT_EQ(done->round, 1u);
  EXPECT_EQ(done->pages, 1u);
  const uint8_t* p = dst_.region.page(5);
  EXPECT_TRUE(std::all_of(p, p + 4096, [](uint8_t b) { return b == 0x22; }));
}

}  // namespace
}  // namespace ramferry
