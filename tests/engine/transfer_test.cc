// End to end on loopback: a real Sender and Receiver over real sockets,
// rounds that rewrite random pages, and a byte-exact destination at the end.
#include <atomic>
#include <future>
#include <memory>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "channels/transport.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/transport_selection.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

using testing::LoopbackPair;
using testing::MakeRegion;
using testing::SameBytes;
using testing::ScaledBytes;
using testing::ServingReceiver;

// The transports that send from this process's memory (every one but
// those that place pages remotely) and run here; the family table names
// them, so a new one is tested here too.
std::vector<TransportKind> SocketTransports() {
  std::vector<TransportKind> kinds;
  for (TransportKind kind :
       testing::TransportsWith(0, channels::kCapRemotePlacement)) {
    if (testing::WhyUnavailable(kind).empty()) kinds.push_back(kind);
  }
  return kinds;
}

// Rewrites `count` pages picked by `rng` with a pattern from `rng` and marks
// them dirty; returns how many distinct pages. It writes pages a round may
// still be sending, as a live workload does: the engine is built for that
// (a page written during its send is dirty and goes again), so, like
// memload's writers, these writes are not instrumented for TSan.
__attribute__((no_sanitize("thread"))) uint64_t RewriteRandomPages(
    const Region& r, uint64_t count, std::mt19937_64& rng, DirtyBitmap& dirty) {
  std::set<uint64_t> pages;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t p = rng() % r.page_count();
    const uint64_t v = rng();
    auto* words = reinterpret_cast<volatile uint64_t*>(r.page(p));
    for (size_t w = 0; w < r.page_size / 8; ++w) words[w] = v + w;
    dirty.Set(p);
    pages.insert(p);
  }
  return pages.size();
}

class TransferTest
    : public ::testing::TestWithParam<std::tuple<TransportKind, uint32_t>> {};

TEST_P(TransferTest, FiveRoundsEndByteIdentical) {
  const auto [kind, channels] = GetParam();
  const uint64_t bytes = ScaledBytes(256ull << 20);
  auto src = MakeRegion(1, bytes, /*seed=*/7, /*fill=*/true);
  auto dst = MakeRegion(1, bytes);

  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  opt.transport = kind;
  opt.channels = channels;
  opt.header_slots = 64;  // small: the header array wraps many times
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);

  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  std::mt19937_64 rng(channels * 31 + static_cast<int>(kind));
  uint64_t expected = src.region.page_count();
  for (int round = 0; round < 5; ++round) {
    if (round > 0) {
      expected = RewriteRandomPages(src.region, src.region.page_count() / 20,
                                    rng, dirty);
    }
    absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
    ASSERT_OK(r);
    EXPECT_EQ(r->round, static_cast<uint64_t>(round));
    EXPECT_EQ(r->pages, expected);
    EXPECT_EQ(dirty.Count(), 0u);
    EXPECT_EQ(rx.receiver().applied_rounds(), static_cast<uint64_t>(round + 1));
  }
  absl::StatusOr<VerifyReport> v = (*sender)->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok());
  EXPECT_EQ(v->pages_checked, src.region.page_count());

  const SessionStats stats = (*sender)->stats();
  ASSERT_OK((*sender)->Finish());
  ASSERT_OK(rx.result());
  EXPECT_TRUE(SameBytes(src.region, dst.region));
  const ChannelStats done = (*sender)->stats().Total();
  EXPECT_EQ(done.finishes, channels);
  EXPECT_EQ(done.send_calls, done.packets + done.syncs + done.finishes);
  EXPECT_EQ(rx.receiver().stats().Total().finishes, channels);

  const ChannelStats t = stats.Total();
  EXPECT_EQ(stats.rounds, 5u);
  EXPECT_EQ(stats.channels.size(), channels);
  EXPECT_EQ(t.syncs, 5u * channels);
  // One packet, one send call (the sockets block, so the kernel takes
  // each packet whole).
  EXPECT_EQ(t.short_sends, 0u);
  EXPECT_EQ(t.send_calls, t.packets + t.syncs);
  if (kind == TransportKind::kTcpZeroCopy) {
    // Data packets go zero-copy; SYNC markers are copied (tens of bytes).
    EXPECT_EQ(t.zc_sends, t.packets);
    // Every round flushed: nothing outstanding, nothing lost.
    EXPECT_EQ(t.zc_completions, t.zc_sends);
    EXPECT_LE(t.zc_copied, t.zc_completions);
    EXPECT_GE(t.flushes, 5u * channels);
    EXPECT_LE(t.max_slots_in_flight, 64u);
  } else {
    EXPECT_EQ(t.zc_sends, 0u);
  }
  // Every channel carried data (the scheduler spreads the load).
  for (const ChannelStats& c : stats.channels) EXPECT_GT(c.packets, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Matrix, TransferTest,
    ::testing::Combine(::testing::Values(TransportKind::kTcp,
                                         TransportKind::kTcpZeroCopy),
                       ::testing::Values(1u, 2u, 4u, 8u)),
    [](const auto& info) {
      return absl::StrCat(testing::TestName(std::get<0>(info.param)), "_x",
                          std::get<1>(info.param));
    });

TEST(TransferTest, SeveralRegionsWithDifferentPageSizes) {
  auto src_a = MakeRegion(10, 8 << 20, 1, true);
  auto src_b = MakeRegion(20, 8 << 20, 2, true);
  src_b.region.page_size = 64 << 10;
  auto dst_a = MakeRegion(10, 8 << 20);
  auto dst_b = MakeRegion(20, 8 << 20);
  dst_b.region.page_size = 64 << 10;

  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  opt.channels = 3;
  opt.packet_pages = 16;
  ServingReceiver rx(opt, {dst_b.region, dst_a.region});  // order differs
  opt.port = rx.port();
  Region regions[] = {src_a.region, src_b.region};
  auto sender = Sender::Connect(opt, regions);
  ASSERT_OK(sender);
  DirtyBitmap a(src_a.region.page_count()), b(src_b.region.page_count());
  a.SetAll();
  b.SetAll();
  DirtyBitmap* bitmaps[] = {&a, &b};
  absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
  ASSERT_OK(r);
  EXPECT_EQ(r->bytes, 16u << 20);
  ASSERT_OK((*sender)->Finish());
  ASSERT_OK(rx.result());
  EXPECT_TRUE(SameBytes(src_a.region, dst_a.region));
  EXPECT_TRUE(SameBytes(src_b.region, dst_b.region));
}

// The baseline without channel threads: the scheduler drives each channel
// itself, with the same result.
TEST(TransferTest, SingleThreadModeIsByteExact) {
  for (TransportKind kind : SocketTransports()) {
    SessionOptions opt = ::ramferry::testing::InsecureOptions();
    opt.transport = kind;
    opt.channels = 3;
    opt.single_thread = true;
    opt.header_slots = 16;
    LoopbackPair p(ScaledBytes(32 << 20), 9, opt);
    ASSERT_NE(p.sender, nullptr);
    ASSERT_OK(p.SendEverything());
    DirtyBitmap dirty(p.src.region.page_count());
    for (uint64_t page = 0; page < dirty.pages(); page += 7) {
      p.src.region.page(page)[9] ^= 0x5a;
      dirty.Set(page);
    }
    DirtyBitmap* bitmaps[] = {&dirty};
    ASSERT_OK(p.sender->SendRound(bitmaps));
    const ChannelStats t = p.sender->stats().Total();
    EXPECT_EQ(t.ring_max_occupancy, 1u);  // drained at every push
    ASSERT_OK(p.sender->Finish());
    ASSERT_OK(p.rx->result());
    EXPECT_TRUE(SameBytes(p.src.region, p.dst.region));
  }
}

TEST(TransferTest, OverIpv6) {
  for (TransportKind kind : SocketTransports()) {
    SessionOptions opt = ::ramferry::testing::InsecureOptions();
    opt.host = "::1";
    opt.transport = kind;
    LoopbackPair p(4 << 20, 10, opt);
    ASSERT_NE(p.sender, nullptr);
    ASSERT_OK(p.SendEverything());
    ASSERT_OK(p.sender->Finish());
    ASSERT_OK(p.rx->result());
    EXPECT_TRUE(SameBytes(p.src.region, p.dst.region));
    if (kind == TransportKind::kTcpZeroCopy) {
      // Completions arrive through IPV6_RECVERR on an IPv6 socket.
      EXPECT_EQ(p.sender->stats().Total().zc_completions,
                p.sender->stats().Total().zc_sends);
    }
  }
}

TEST(TransferTest, EmptyRoundStillSynchronises) {
  LoopbackPair p(1 << 20, 3);
  ASSERT_NE(p.sender, nullptr);
  DirtyBitmap dirty(p.src.region.page_count());
  DirtyBitmap* bitmaps[] = {&dirty};
  absl::StatusOr<RoundResult> r = p.sender->SendRound(bitmaps);
  ASSERT_OK(r);
  EXPECT_EQ(r->pages, 0u);
  EXPECT_EQ(p.sender->confirmed_rounds(), 1u);
  ASSERT_OK(p.sender->Finish());
  EXPECT_OK(p.rx->result());
}

TEST(TransferTest, VerifyFindsPagesThatDiffer) {
  LoopbackPair p(4 << 20, 4);
  ASSERT_NE(p.sender, nullptr);
  ASSERT_OK(p.SendEverything());
  // Written after the round and never sent: Verify must name it.
  p.src.region.page(77)[100] ^= 0xff;
  absl::StatusOr<VerifyReport> v = p.sender->Verify();
  ASSERT_OK(v);
  EXPECT_EQ(v->pages_mismatched, 1u);
  ASSERT_EQ(v->first_mismatches.size(), 1u);
  EXPECT_EQ(v->first_mismatches[0], std::make_pair(1u, uint64_t{77}));
  ASSERT_OK(p.sender->Finish());
  EXPECT_OK(p.rx->result());
}

// One session with `dest_announces` / `src_announces` for
// kFeatureNextHeaderSize, one full round of `pattern` pages (every page, or
// every other one) at `packet_pages`; byte-exact, and the destination's
// receive statistics.
ChannelStats AnnouncedRound(TransportKind kind, bool src_announces,
                            bool dest_announces, uint32_t packet_pages,
                            bool every_other_page) {
  const uint64_t bytes = 32ull << 20;
  auto src = MakeRegion(1, bytes, /*seed=*/11, /*fill=*/true);
  auto dst = MakeRegion(1, bytes);
  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  opt.transport = kind;
  opt.channels = 2;
  opt.packet_pages = packet_pages;
  opt.announce_next_header = dest_announces;
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  opt.announce_next_header = src_announces;
  auto sender = Sender::Connect(opt, {&src.region, 1});
  EXPECT_OK(sender);
  if (!sender.ok()) return {};
  DirtyBitmap dirty(src.region.page_count());
  DirtyBitmap* bitmaps[] = {&dirty};
  for (int pass = 0; pass < (every_other_page ? 2 : 1); ++pass) {
    for (uint64_t p = pass; p < src.region.page_count();
         p += every_other_page ? 2 : 1) {
      dirty.Set(p);
    }
    absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
    EXPECT_OK(r);
  }
  absl::StatusOr<VerifyReport> v = (*sender)->Verify();
  EXPECT_TRUE(v.ok() && v->ok()) << v.status();
  EXPECT_OK((*sender)->Finish());
  EXPECT_OK(rx.result());
  EXPECT_TRUE(SameBytes(src.region, dst.region));
  return rx.receiver().stats().Total();
}

TEST(TransferTest, AnnouncedHeadersMeanOneReadPerDataPacket) {
  for (TransportKind kind : SocketTransports()) {
    SCOPED_TRACE(std::string(TransportKindName(kind)));
    const ChannelStats t = AnnouncedRound(kind, true, true, 128, false);
    ASSERT_GT(t.packets, 0u);
    // Each data packet: its payload and the next header in one call; the
    // first packet after a SYNC may cost two more (fixed part, offsets).
    // A read also returns early when it gets ahead of the sender (the
    // payload is in, the next header not yet), which a loaded machine
    // makes common: the bound sits halfway to the two calls a packet that
    // an unannounced stream always needs.
    EXPECT_LE(t.recv_calls, t.packets * 3 / 2 + 3 * (t.syncs + t.finishes))
        << t.recv_calls << " calls for " << t.packets << " packets";
    // Either end without the capability: two calls a packet, same bytes.
    for (auto [src, dest] : {std::pair{true, false}, std::pair{false, true}}) {
      const ChannelStats old = AnnouncedRound(kind, src, dest, 128, false);
      EXPECT_GE(old.recv_calls, 2 * old.packets);
    }
  }
}

// The largest packet the destination accepts, every other page dirty: a
// packet's payload is 1024 separate spans, so payload + next header is
// more than IOV_MAX iovecs and the read takes two calls.
TEST(TransferTest, AnnouncedHeadersAtTheLargestPacketWithSparsePages) {
  for (TransportKind kind : SocketTransports()) {
    SCOPED_TRACE(std::string(TransportKindName(kind)));
    const ChannelStats t =
        AnnouncedRound(kind, true, true, SessionOptions{}.max_packet_pages,
                       /*every_other_page=*/true);
    EXPECT_GT(t.packets, 0u);
  }
}

// What each VerifyMode proves, pinned: a page written after its last
// send, without being marked dirty (a write the tracking missed).
TEST(TransferTest, VerifyModesDifferOnAWriteTheTrackingMissed) {
  for (VerifyMode mode :
       {VerifyMode::kFull, VerifyMode::kSent, VerifyMode::kReread}) {
    SessionOptions opt = ::ramferry::testing::InsecureOptions();
    opt.verify = mode;
    LoopbackPair p(4 << 20, 6, opt);
    ASSERT_NE(p.sender, nullptr);
    ASSERT_OK(p.SendEverything());
    absl::StatusOr<VerifyReport> clean = p.sender->Verify();
    ASSERT_OK(clean);
    EXPECT_TRUE(clean->ok());
    EXPECT_EQ(clean->pages_checked, p.src.region.page_count());
    p.src.region.page(300)[5] ^= 0x5a;
    absl::StatusOr<VerifyReport> v = p.sender->Verify();
    ASSERT_OK(v);
    // full and reread compare the source's memory now; sent compares
    // what was sent with what landed, which still agree.
    EXPECT_EQ(v->pages_mismatched, mode == VerifyMode::kSent ? 0u : 1u)
        << static_cast<int>(mode);
    ASSERT_OK(p.sender->Finish());
    EXPECT_OK(p.rx->result());
  }
}

// The destination answers from what landed, not from memory it may be
// running on: a destination page changed after the final round does not
// make full verification fail (a source page that differs from what
// landed does: VerifyFindsPagesThatDiffer).
TEST(TransferTest, FullVerificationComparesWithWhatLanded) {
  LoopbackPair p(4 << 20, 8);
  ASSERT_NE(p.sender, nullptr);
  ASSERT_OK(p.SendEverything());
  p.dst.region.page(12)[0] ^= 1;  // the resumed destination wrote it
  absl::StatusOr<VerifyReport> v = p.sender->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok());
  ASSERT_OK(p.sender->Finish());
  EXPECT_OK(p.rx->result());
}

// StartRound/AwaitRound: the next round is queued behind the one in
// flight, before it is confirmed; pages rewritten in between still end
// byte-identical (the destination's SYNC barrier orders the copies).
TEST(TransferTest, OverlappedRoundsEndByteIdentical) {
  for (TransportKind kind : SocketTransports()) {
    for (uint32_t channels : {1u, 4u}) {
      SCOPED_TRACE(absl::StrCat(TransportKindName(kind), " x", channels));
      const uint64_t bytes = ScaledBytes(64ull << 20);
      auto src = MakeRegion(1, bytes, /*seed=*/3, /*fill=*/true);
      auto dst = MakeRegion(1, bytes);
      SessionOptions opt = ::ramferry::testing::InsecureOptions();
      opt.transport = kind;
      opt.channels = channels;
      opt.header_slots = 64;
      ServingReceiver rx(opt, {dst.region});
      opt.port = rx.port();
      auto sender = Sender::Connect(opt, {&src.region, 1});
      ASSERT_OK(sender);
      DirtyBitmap dirty(src.region.page_count());
      DirtyBitmap* bitmaps[] = {&dirty};
      dirty.SetAll();
      ASSERT_OK((*sender)->StartRound(bitmaps));
      std::vector<uint64_t> started = {src.region.page_count()};
      for (int round = 1; round < 6; ++round) {
        // Rewritten while the previous round may still be on the wire;
        // the same pages again and again, so copies of one page from
        // consecutive rounds race on different channels.
        std::mt19937_64 same(round % 2);
        started.push_back(RewriteRandomPages(
            src.region, src.region.page_count() / 10, same, dirty));
        ASSERT_OK((*sender)->StartRound(bitmaps));
        absl::StatusOr<RoundResult> r = (*sender)->AwaitRound();
        ASSERT_OK(r);
        EXPECT_EQ(r->round, static_cast<uint64_t>(round - 1));
        EXPECT_EQ(r->pages, started[round - 1]);
      }
      // SendRound refuses while a started round is pending.
      EXPECT_EQ((*sender)->SendRound(bitmaps).status().code(),
                absl::StatusCode::kFailedPrecondition);
      // Verify awaits the last round first.
      absl::StatusOr<VerifyReport> v = (*sender)->Verify();
      ASSERT_OK(v);
      EXPECT_TRUE(v->ok());
      EXPECT_EQ((*sender)->confirmed_rounds(), 6u);
      EXPECT_EQ((*sender)->AwaitRound().status().code(),
                absl::StatusCode::kFailedPrecondition);
      ASSERT_OK((*sender)->Finish());
      ASSERT_OK(rx.result());
      EXPECT_TRUE(SameBytes(src.region, dst.region));
    }
  }
}

// Where rounds go one at a time (surviving channel loss; remote placement
// alike), StartRound sends the round whole, but AwaitRound still returns
// each started round's own result, in order: none is dropped.
TEST(TransferTest, RoundsStartedOneAtATimeAreAwaitedInOrder) {
  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  opt.channels = 2;
  opt.survive_channel_loss = true;
  LoopbackPair p(8ull << 20, 5, opt);
  ASSERT_NE(p.sender, nullptr);
  const Region& src = p.src.region;
  DirtyBitmap dirty(src.page_count());
  DirtyBitmap* bitmaps[] = {&dirty};
  dirty.SetAll();
  ASSERT_OK(p.sender->StartRound(bitmaps));
  std::mt19937_64 rng(7);
  const uint64_t rewritten = RewriteRandomPages(src, 100, rng, dirty);
  ASSERT_OK(p.sender->StartRound(bitmaps));
  EXPECT_EQ(p.sender->confirmed_rounds(), 2u) << "each sent whole";
  const uint64_t pages[] = {src.page_count(), rewritten};
  for (uint64_t round = 0; round < 2; ++round) {
    absl::StatusOr<RoundResult> r = p.sender->AwaitRound();
    ASSERT_OK(r) << "round " << round;
    EXPECT_EQ(r->round, round);
    EXPECT_EQ(r->pages, pages[round]);
  }
  ASSERT_OK(p.sender->Finish());
  ASSERT_OK(p.rx->result());
  EXPECT_TRUE(SameBytes(src, p.dst.region));
}

TEST(TransferTest, FinishAwaitsAStartedRound) {
  LoopbackPair p(8 << 20, 9);
  ASSERT_NE(p.sender, nullptr);
  DirtyBitmap dirty(p.src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  ASSERT_OK(p.sender->StartRound(bitmaps));
  ASSERT_OK(p.sender->Finish());
  EXPECT_EQ(p.sender->confirmed_rounds(), 1u);
  ASSERT_OK(p.rx->result());
  EXPECT_TRUE(SameBytes(p.src.region, p.dst.region));
}

// The destination's commit point (Receiver::OnCommit): it runs once, when
// the source's FINISH arrived, before the confirmation goes; refusing it
// fails the session with its error, and the source, past its own commit
// point, learns that the outcome is unknown.
TEST(TransferTest, TheCommitHookRunsOnceBeforeTheConfirmationAndMayRefuse) {
  for (const bool refuse : {false, true}) {
    SCOPED_TRACE(refuse ? "refused" : "committed");
    auto src = MakeRegion(1, 4 << 20, /*seed=*/3, /*fill=*/true);
    auto dst = MakeRegion(1, 4 << 20);
    SessionOptions opt = testing::InsecureOptions();
    absl::StatusOr<std::unique_ptr<Receiver>> rx =
        Receiver::Listen(opt, {&dst.region, 1});
    ASSERT_OK(rx);
    std::atomic<int> commits{0};
    (*rx)->OnCommit([&]() -> absl::Status {
      ++commits;
      return refuse ? absl::CancelledError("cancelled by the test")
                    : absl::OkStatus();
    });
    opt.port = (*rx)->port();
    std::future<absl::Status> served =
        std::async(std::launch::async, [&] { return (*rx)->Serve(); });
    absl::StatusOr<std::unique_ptr<Sender>> sender =
        Sender::Connect(opt, {&src.region, 1});
    ASSERT_OK(sender);
    DirtyBitmap dirty(src.region.page_count());
    dirty.SetAll();
    DirtyBitmap* bitmaps[] = {&dirty};
    ASSERT_OK((*sender)->SendRound(bitmaps));
    EXPECT_EQ(commits.load(), 0);  // not before FINISH
    const absl::Status finished = (*sender)->Finish();
    const absl::Status serve = served.get();
    EXPECT_EQ(commits.load(), 1);
    EXPECT_TRUE((*sender)->finish_sent());
    if (refuse) {
      EXPECT_THAT(finished, StatusIs(absl::StatusCode::kCancelled,
                                     HasSubstr("cancelled by the test")));
      EXPECT_TRUE(absl::IsCancelled(serve)) << serve;
      EXPECT_THAT(std::string(serve.message()),
                  ::testing::HasSubstr("cancelled by the test"));
    } else {
      EXPECT_OK(finished);
      EXPECT_OK(serve);
      EXPECT_TRUE(SameBytes(src.region, dst.region));
    }
  }
}

TEST(TransferTest, BadArgumentsAreRejectedWithoutEndingTheSession) {
  LoopbackPair p(1 << 20, 5);
  ASSERT_NE(p.sender, nullptr);
  DirtyBitmap wrong(3);
  wrong.SetAll();
  DirtyBitmap* bad[] = {&wrong};
  EXPECT_TRUE(absl::IsInvalidArgument(p.sender->SendRound(bad).status()));
  EXPECT_EQ(wrong.Count(), 3u);  // nothing taken
  ASSERT_OK(p.SendEverything());
  ASSERT_OK(p.sender->Finish());
  EXPECT_OK(p.rx->result());
  EXPECT_TRUE(SameBytes(p.src.region, p.dst.region));
}

TEST(TransferTest, RegionMismatchIsRefusedAndTheDestinationWaitsOn) {
  auto src = MakeRegion(1, 2 << 20, 6, true);
  auto dst = MakeRegion(1, 1 << 20);
  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_THAT(sender,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("destination refused the region table")));
  EXPECT_TRUE(absl::IsFailedPrecondition(sender.status())) << sender.status();
  EXPECT_NE(sender.status().message().find("region 1"), absl::string_view::npos)
      << sender.status();
  // The destination waits on for a source whose regions match.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (rx.receiver().stats().sessions_abandoned == 0 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(rx.receiver().stats().sessions_abandoned, 1u);
  EXPECT_FALSE(rx.done());
  auto matching = MakeRegion(1, 1 << 20, 8, true);
  auto good = Sender::Connect(opt, {&matching.region, 1});
  ASSERT_OK(good);
  DirtyBitmap dirty(matching.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  ASSERT_OK((*good)->SendRound(bitmaps));
  ASSERT_OK((*good)->Finish());
  ASSERT_OK(rx.result());
  EXPECT_TRUE(SameBytes(matching.region, dst.region));
}

TEST(TransferTest, ConnectToNobodyFailsAfterTheTimeout) {
  auto src = MakeRegion(1, 1 << 20);
  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  opt.port = 1;  // nothing listens on port 1
  opt.connect_timeout = absl::Milliseconds(300);
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_THAT(sender, StatusIs(absl::StatusCode::kUnavailable,
                               HasSubstr("Connection refused")));
  EXPECT_NE(sender.status().message().find("127.0.0.1:1"),
            absl::string_view::npos)
      << sender.status();
}

TEST(TransferTest, InvalidOptionsNameTheField) {
  auto src = MakeRegion(1, 1 << 20);
  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  opt.channels = 0;
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_TRUE(absl::IsInvalidArgument(sender.status()));
  EXPECT_NE(sender.status().message().find("channels"),
            absl::string_view::npos);
  opt.channels = 1;
  opt.ring_entries = 100;
  sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_TRUE(absl::IsInvalidArgument(sender.status()));
  EXPECT_NE(sender.status().message().find("ring_entries"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace ramferry
