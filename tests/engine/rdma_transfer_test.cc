// The rdma transport against real verbs. These tests run where an RDMA
// device exists: in CI, inside the Soft-RoCE VM (tests/rdma_vm, which sets
// RXE_IP); elsewhere they skip, saying why.
//
// The *Killed* tests fork a peer, and must run in a process that has not
// used RDMA yet: librdmacm keeps the verbs device open process-wide, and a
// forked child cannot use the device file it inherits (the kernel refuses
// its commands with EACCES). tests/engine/CMakeLists.txt runs each of them
// in a VM process of its own.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "channels/rdma/rdma.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/sender.h"
#include "tests/support/child_peers.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::AnyOf;
using testing::ChildDestination;
using testing::ChildSource;
using ::testing::HasSubstr;
using testing::MakeRegion;
using testing::SameBytes;
using testing::ServingReceiver;

// Keep data in the tens of MB: rxe under TCG moves ~20 MB/s.
constexpr uint64_t kBytes = 16ull << 20;

class RdmaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = channels::ProbeRdma(); !s.ok()) {
      GTEST_SKIP() << "needs an RDMA device (run in tests/rdma_vm): "
                   << s.message();
    }
    const char* ip = std::getenv("RXE_IP");
    if (ip == nullptr)
      GTEST_SKIP() << "RXE_IP (the RDMA device's address) unset";
    opt_.host = ip;
    opt_.transport = TransportKind::kRdma;
    opt_.stall_timeout = absl::Seconds(20);
  }
  SessionOptions opt_ = ::ramferry::testing::InsecureOptions();
};

struct Outcome {
  ChannelStats sender;
  ChannelStats receiver;
  bool identical = false;
};

// A destination serving `dst` with `dest`, and a source of `src` connected
// to it with `source` (null where that failed: the test has failed), every
// page of `dirty` marked.
struct RdmaSession {
  RdmaSession(const SessionOptions& source, const SessionOptions& dest,
              testing::TestRegion& src, testing::TestRegion& dst)
      : rx(dest, {dst.region}), dirty(src.region.page_count()) {
    SessionOptions opt = source;
    opt.port = rx.port();
    absl::StatusOr<std::unique_ptr<Sender>> s =
        Sender::Connect(opt, {&src.region, 1});
    EXPECT_OK(s);
    if (s.ok()) sender = *std::move(s);
    dirty.SetAll();
  }
  ServingReceiver rx;
  std::unique_ptr<Sender> sender;
  DirtyBitmap dirty;
  DirtyBitmap* bitmaps[1] = {&dirty};
};

// Rounds over rdma: round 0 everything, then two rounds rewriting pages.
Outcome Transfer(const SessionOptions& source, const SessionOptions& dest,
                 testing::TestRegion& src, testing::TestRegion& dst) {
  Outcome out;
  RdmaSession session(source, dest, src, dst);
  if (session.sender == nullptr) return out;
  Sender* sender = session.sender.get();
  ServingReceiver& rx = session.rx;
  DirtyBitmap& dirty = session.dirty;
  for (int round = 0; round < 3; ++round) {
    if (round > 0) {
      for (uint64_t p = round; p < dirty.pages(); p += 37) {
        src.region.page(p)[round] ^= 0xa5;
        dirty.Set(p);
      }
    }
    absl::StatusOr<RoundResult> r = sender->SendRound(session.bitmaps);
    EXPECT_OK(r);
    if (!r.ok()) return out;
  }
  absl::StatusOr<VerifyReport> v = sender->Verify();
  EXPECT_TRUE(v.ok() && v->ok()) << v.status();
  EXPECT_OK(sender->Finish());
  absl::Status served = rx.result();
  EXPECT_OK(served);
  out.sender = sender->stats().Total();
  out.receiver = rx.receiver().stats().Total();
  out.identical = SameBytes(src.region, dst.region);
  return out;
}

class RdmaRoundsTest
    : public RdmaTest,
      public ::testing::WithParamInterface<std::tuple<bool, uint32_t>> {};

TEST_P(RdmaRoundsTest, RoundsAreByteExact) {
  const auto [pin_all, channels] = GetParam();
  opt_.rdma_pin_all = pin_all;
  opt_.channels = channels;
  auto src = MakeRegion(1, kBytes, 31, true);
  auto dst = MakeRegion(1, kBytes);
  Outcome o = Transfer(opt_, opt_, src, dst);
  EXPECT_TRUE(o.identical);
  const uint64_t chunks = kBytes / opt_.rdma_chunk_bytes;
  // Each end pins and registers the region once, whatever the channel
  // count: the channels share one protection domain and its
  // registrations (pin-all: the whole region; on demand: each chunk, by
  // whichever channel wrote to it first).
  EXPECT_EQ(o.receiver.chunks_registered, chunks);
  EXPECT_EQ(o.sender.chunks_registered, chunks);
  EXPECT_EQ(o.receiver.rdma_registered_bytes, kBytes);
  EXPECT_EQ(o.sender.rdma_registered_bytes, kBytes);
  if (pin_all) {
    EXPECT_EQ(o.sender.register_round_trips, 0u);
  } else {
    // Many chunks per round trip. (Each channel still asks for each chunk
    // it writes to: which chunks went as zero is per queue pair.)
    EXPECT_GT(o.sender.register_batch_max, 1u);
  }
  EXPECT_EQ(o.sender.chunks_compressed, 0u);  // random data: no zero chunk
  // One post per packet: data, SYNC and FINISH (control messages add the
  // rest).
  EXPECT_GE(o.sender.rdma_posts,
            o.sender.packets + o.sender.syncs + o.sender.finishes);
  EXPECT_GT(o.sender.rdma_outstanding_max, 0u);
  EXPECT_EQ(o.receiver.pages, o.sender.pages);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, RdmaRoundsTest,
    ::testing::Combine(::testing::Bool(), ::testing::Values(1u, 2u, 4u)),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param) ? "pin_all" : "on_demand",
                          "_x", std::get<1>(info.param));
    });

// This process's pinned memory (VmPin: what ibv_reg_mr charges), bytes.
uint64_t PinnedBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmPin:", 0) == 0) return std::stoull(line.substr(6)) << 10;
  }
  return 0;
}

// Pin-all pins each region once a side, however many channels (they share
// one protection domain): with a domain per channel the kernel charged it
// once per channel, 4 x 2 x 64 MiB here (both ends in this process). It is
// registered on a thread of its own while the channels connect; its time
// and rate are counted.
TEST_F(RdmaTest, PinAllPinsEachRegionOnceASide) {
  constexpr uint64_t kRegion = 64ull << 20;
  opt_.rdma_pin_all = true;
  opt_.channels = 4;
  auto src = MakeRegion(1, kRegion, 41, true);
  auto dst = MakeRegion(1, kRegion);
  RdmaSession session(opt_, opt_, src, dst);
  ASSERT_NE(session.sender, nullptr);
  Sender& sender = *session.sender;
  ASSERT_OK(sender.SendRound(session.bitmaps));
  const uint64_t pinned = PinnedBytes();
  ASSERT_OK(sender.Finish());
  ASSERT_OK(session.rx.result());
  EXPECT_TRUE(SameBytes(src.region, dst.region));
  const ChannelStats s = sender.stats().Total();
  const ChannelStats r = session.rx.receiver().stats().Total();
  std::cout << absl::StreamFormat(
      "[ pin-all ] %d channels, a %d MiB region a side: %d MiB pinned; "
      "registered in %s (source), %s (destination, %.0f MiB/s)\n",
      opt_.channels, kRegion >> 20, pinned >> 20,
      absl::FormatDuration(absl::Nanoseconds(s.rdma_register_ns)),
      absl::FormatDuration(absl::Nanoseconds(r.rdma_register_ns)),
      (kRegion >> 20) /
          absl::ToDoubleSeconds(absl::Nanoseconds(r.rdma_register_ns)));
  EXPECT_EQ(s.rdma_registered_bytes, kRegion);
  EXPECT_EQ(r.rdma_registered_bytes, kRegion);
  EXPECT_GE(pinned, 2 * kRegion);
  // Both regions once, and the channels' own buffers (a few MiB).
  EXPECT_LT(pinned, 3 * kRegion) << "a region pinned more than once a side";
}

// StartRound queues the next round behind the one in flight on sockets,
// where the destination's SYNC barrier orders two copies of a page. RDMA
// WRITEs land without waiting at that barrier, and two queue pairs are not
// ordered with each other: a page of round 1 on one channel could land
// before its round-0 copy on another and be overwritten by it. So with
// remote placement a round starts only once the one before is confirmed
// (every channel's WRITEs of it landed before its SYNC did).
TEST_F(RdmaTest, AStartedRoundWaitsForTheOneBeforeOnRemotePlacement) {
  opt_.channels = 2;
  auto src = MakeRegion(1, kBytes, 33, true);
  auto dst = MakeRegion(1, kBytes);
  RdmaSession session(opt_, opt_, src, dst);
  ASSERT_NE(session.sender, nullptr);
  Sender* sender = session.sender.get();
  ServingReceiver& rx = session.rx;
  DirtyBitmap& dirty = session.dirty;
  ASSERT_OK(sender->StartRound(session.bitmaps));
  for (uint64_t p = 0; p < dirty.pages(); p += 3) {
    src.region.page(p)[0] ^= 0x5a;
    dirty.Set(p);
  }
  ASSERT_OK(sender->StartRound(session.bitmaps));
  EXPECT_GE(sender->confirmed_rounds(), 1u)
      << "round 1 started before round 0 was confirmed";
  for (uint64_t round = 0; round < 2; ++round) {
    absl::StatusOr<RoundResult> r = sender->AwaitRound();
    ASSERT_OK(r);
    EXPECT_EQ(r->round, round);
  }
  absl::StatusOr<VerifyReport> v = sender->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok());
  ASSERT_OK(sender->Finish());
  ASSERT_OK(rx.result());
  EXPECT_TRUE(SameBytes(src.region, dst.region));
}

TEST_F(RdmaTest, OldPeerWithoutBatchedRegistrationGetsOneChunkPerRequest) {
  SessionOptions dest = opt_;
  dest.rdma_reg_batch = false;  // an old destination
  auto src = MakeRegion(1, kBytes, 32, true);
  auto dst = MakeRegion(1, kBytes);
  Outcome o = Transfer(opt_, dest, src, dst);
  EXPECT_TRUE(o.identical);
  EXPECT_EQ(o.sender.register_batch_max, 1u);
  // One round trip per chunk and channel that wrote to it; each chunk
  // registered once.
  EXPECT_EQ(o.receiver.chunks_registered, kBytes / opt_.rdma_chunk_bytes);
  EXPECT_GE(o.sender.register_round_trips, o.receiver.chunks_registered);
}

TEST_F(RdmaTest, ZeroChunksGoAsCompressAndAreZeroFilled) {
  // With kFeatureZeroPages the engine sends zero pages as flagged offsets
  // before the transport sees them (the next test); without it, the
  // transport's own COMPRESS of zero chunks still works.
  SessionOptions opt = opt_;
  opt.zero_pages = false;
  auto src = MakeRegion(1, kBytes, 33, true);
  std::memset(src.region.base, 0, kBytes / 2);  // 8 zero chunks
  auto dst = MakeRegion(1, kBytes);
  std::memset(dst.region.base, 0xee, kBytes);  // must be overwritten
  Outcome o = Transfer(opt, opt, src, dst);
  EXPECT_TRUE(o.identical);
  // Round 0 sends the zero half as COMPRESS (each channel for the chunks
  // it touches); later rounds rewrite pages there, which then registers.
  EXPECT_GE(o.sender.chunks_compressed, (kBytes / 2) / opt_.rdma_chunk_bytes);
}

TEST_F(RdmaTest, ZeroPagesGoAsOffsetsAndAreZeroFilled) {
  auto src = MakeRegion(1, kBytes, 33, true);
  std::memset(src.region.base, 0, kBytes / 2);
  auto dst = MakeRegion(1, kBytes);
  std::memset(dst.region.base, 0xee, kBytes);  // must be overwritten
  Outcome o = Transfer(opt_, opt_, src, dst);
  EXPECT_TRUE(o.identical);
  EXPECT_GE(o.sender.zero_pages, kBytes / 2 / 4096);
  EXPECT_EQ(o.receiver.zero_pages, o.sender.zero_pages);
  EXPECT_EQ(o.sender.chunks_compressed, 0u);
}

TEST_F(RdmaTest, InlineOnlyWhatTheQueuePairGranted) {
  auto src = MakeRegion(1, 4 << 20, 34, true);
  for (uint32_t ask : {512u, 0u}) {
    SessionOptions opt = opt_;
    opt.rdma_max_inline = ask;
    auto dst = MakeRegion(1, 4 << 20);
    Outcome o = Transfer(opt, opt, src, dst);
    EXPECT_TRUE(o.identical) << ask;
    for (const ChannelStats& s : {o.sender, o.receiver}) {
      // Nothing larger than the granted room ever went inline.
      EXPECT_LE(s.inline_max_bytes, s.inline_granted) << ask;
      EXPECT_LE(s.inline_granted, std::max<uint32_t>(ask, 64)) << ask;
    }
    if (ask == 512) {
      // SYNC/FINISH headers (64 bytes) and small control messages fit.
      EXPECT_GE(o.sender.inline_granted, 64u);
      EXPECT_GE(o.sender.inline_sends, o.sender.syncs + o.sender.finishes);
    } else {
      // A 64-byte header no longer fits whatever was granted.
      EXPECT_LT(o.sender.inline_granted, 64u);
      EXPECT_LT(o.sender.inline_max_bytes, 64u);
    }
  }
}

TEST_F(RdmaTest, DestinationKilledMidRoundEndsTheSourceCleanly) {
  ChildDestination child(opt_, kBytes);
  ASSERT_NE(child.port(), 0);
  auto src = MakeRegion(1, kBytes, 35, true);
  opt_.port = child.port();
  auto sender = Sender::Connect(opt_, {&src.region, 1});
  ASSERT_OK(sender);
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  std::atomic<bool> round_over{false};
  std::atomic<bool> killed_mid_round{false};
  std::thread killer([&] {
    // Mid-round: once packets flow (or at once, should the round end
    // without any, so the test cannot hang on its own killer).
    while ((*sender)->stats().Total().packets < 4 && !round_over.load()) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    killed_mid_round.store(!round_over.load());
    child.Signal(SIGKILL);
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
  round_over.store(true);
  killer.join();
  // Otherwise the round failed for another reason before the kill.
  ASSERT_TRUE(killed_mid_round.load()) << r.status();
  // The killed peer's connections closed under the source: UNAVAILABLE.
  ASSERT_THAT(r, StatusIs(absl::StatusCode::kUnavailable,
                          AnyOf(HasSubstr("channel"),
                                HasSubstr("control connection"))));
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  EXPECT_EQ((*sender)->confirmed_rounds(), 0u);
}

TEST_F(RdmaTest, SourceKilledMidRoundEndsTheDestinationCleanly) {
  ChildSource source(opt_, kBytes, 37);
  auto dst = MakeRegion(1, kBytes);
  ServingReceiver rx(opt_, {dst.region});
  ASSERT_TRUE(source.Connect(rx.port()));
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (rx.receiver().stats().Total().pages < kBytes / 4096 + 64 &&
         !rx.done() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  // The source is in its second round, alive: the kill comes mid-round.
  ASSERT_FALSE(rx.done()) << rx.result();
  ASSERT_GE(rx.receiver().stats().Total().pages, kBytes / 4096 + 64);
  source.Kill();
  const absl::Time killed = absl::Now();
  absl::Status s = rx.result();
  EXPECT_LT(absl::Now() - killed, absl::Seconds(30));
  EXPECT_THAT(s,
              StatusIs(absl::StatusCode::kUnavailable,
                       AnyOf(HasSubstr("channel"),
                             HasSubstr("control connection to the source"))));
}

TEST_F(RdmaTest, SourceAbortEndsTheDestinationCleanly) {
  auto src = MakeRegion(1, 4 << 20, 36, true);
  auto dst = MakeRegion(1, 4 << 20);
  ServingReceiver rx(opt_, {dst.region});
  opt_.port = rx.port();
  auto sender = Sender::Connect(opt_, {&src.region, 1});
  ASSERT_OK(sender);
  (*sender)->Abort(absl::CancelledError("operator stopped it"));
  absl::Status s = rx.result();
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("source reported: operator stopped it"));
}

TEST(RdmaWithoutDevice, SaysSoClearly) {
  if (channels::ProbeRdma().ok())
    GTEST_SKIP() << "this host has an RDMA device";
  auto src = MakeRegion(1, 1 << 20);
  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  opt.transport = TransportKind::kRdma;
  opt.port = 1;
  EXPECT_THAT(Sender::Connect(opt, {&src.region, 1}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("no RDMA device")));
}

}  // namespace
}  // namespace ramferry
