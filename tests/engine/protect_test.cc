// Protected streams end to end (proto/seal.h): every socket transport, both
// modes, with a workload writing its pages while they are sealed and sent,
// and what each end accepts or refuses before a byte moves.
#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "channels/transport.h"
#include "engine/channel_sender.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/packet.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/transport_selection.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;
using testing::MakeRegion;
using testing::SameBytes;
using testing::ScaledBytes;
using testing::ServingReceiver;

const std::string kKey = "protect-test-key-0123456789abcdef";

SessionOptions Keyed(Protection protect) {
  SessionOptions o;
  o.auth_key = kKey;
  o.protect = protect;
  o.stall_timeout = absl::Seconds(20);
  return o;
}

// A writer that keeps rewriting random pages (and marks them dirty) while
// rounds seal and send them: a tag must cover what went on the wire, never
// the pages as they are when the kernel reads them. Not instrumented for
// TSan, like memload's writers: the engine reads pages being written by
// design.
class Workload {
 public:
  Workload(const Region& r, DirtyBitmap* dirty) : r_(r), dirty_(dirty) {}
  ~Workload() { Stop(); }
  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  uint64_t writes() const { return writes_.load(); }

 private:
  __attribute__((no_sanitize("thread"))) void Run() {
    std::mt19937_64 rng(99);
    while (!stop_.load(std::memory_order_relaxed)) {
      const uint64_t p = rng() % r_.page_count();
      auto* words = reinterpret_cast<volatile uint64_t*>(r_.page(p));
      const uint64_t v = rng();
      for (size_t w = 0; w < r_.page_size / 8; w += 8) words[w] = v + w;
      dirty_->Set(p);
      writes_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  const Region& r_;
  DirtyBitmap* const dirty_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> writes_{0};
  std::thread thread_;
};

class ProtectTest : public ::testing::TestWithParam<
                        std::tuple<TransportKind, Protection, Compression>> {};

TEST_P(ProtectTest, LiveRoundsEndByteIdenticalAndVerified) {
  const auto [kind, protect, compression] = GetParam();
  if (std::string why = testing::WhyUnavailable(kind); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const uint64_t bytes = ScaledBytes(64ull << 20);
  // Half random, a quarter zero, a quarter text-like: every payload kind
  // (pages, zero pages, frames that shrink) is sealed.
  auto src = MakeRegion(1, bytes, /*seed=*/5, /*fill=*/true);
  std::memset(src.region.page(0), 0, bytes / 4);
  for (uint64_t p = src.region.page_count() / 4;
       p < src.region.page_count() / 2; ++p) {
    std::memset(src.region.page(p), 'a' + p % 26, src.region.page_size / 2);
  }
  auto dst = MakeRegion(1, bytes);

  SessionOptions opt = Keyed(protect);
  opt.transport = kind;
  opt.channels = 3;
  opt.header_slots = 32;  // the staging buffers rotate under a wrapping array
  opt.compression = compression;
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);

  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  Workload writer(src.region, &dirty);
  writer.Start();
  for (int round = 0; round < 4; ++round) {
    absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
    ASSERT_OK(r);
  }
  writer.Stop();
  // The final round, with the workload paused, as a migration's last.
  ASSERT_OK((*sender)->SendRound(bitmaps));
  absl::StatusOr<VerifyReport> v = (*sender)->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok());
  ASSERT_OK((*sender)->Finish());
  const ChannelStats sent = (*sender)->stats().Total();
  ASSERT_OK(rx.result());
  EXPECT_TRUE(SameBytes(src.region, dst.region));
  EXPECT_GT(writer.writes(), 0u);

  // Every byte that travelled was sealed, and opened at the destination.
  const ChannelStats got = rx.receiver().stats().Total();
  EXPECT_EQ(sent.sealed_bytes, sent.payload_bytes + sent.header_bytes);
  EXPECT_EQ(got.sealed_bytes, sent.sealed_bytes);
  if (compression == Compression::kOn) {
    EXPECT_GT(sent.compressed_packets, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Transports, ProtectTest,
    ::testing::Combine(
        ::testing::ValuesIn(testing::TransportsWith(
            0, channels::kCapRemotePlacement | channels::kCapOwnsConnection)),
        ::testing::Values(Protection::kMac, Protection::kEncrypt),
        ::testing::Values(Compression::kOff, Compression::kOn)),
    [](const auto& info) {
      return absl::StrCat(
          testing::TestName(std::get<0>(info.param)), "_",
          ProtectionName(std::get<1>(info.param)),
          std::get<2>(info.param) == Compression::kOn ? "_compressed" : "");
    });

// The most pages a destination accepts per packet (4096): a sealing source
// cuts them at kMaxStagedPayloadBytes (8 MiB: 2048 pages), which the
// destination opens where they land, and sparse rewrites after them still
// go sealed; every mode, byte exact.
TEST(ProtectLimitsTest, TheLargestPacketsAreOpenedWhereTheyLand) {
  for (Protection protect : {Protection::kMac, Protection::kEncrypt}) {
    SCOPED_TRACE(ProtectionName(protect));
    const uint64_t bytes = ScaledBytes(64ull << 20);
    auto src = MakeRegion(1, bytes, /*seed=*/9, /*fill=*/true);
    auto dst = MakeRegion(1, bytes);
    SessionOptions opt = Keyed(protect);
    opt.channels = 2;
    opt.packet_pages = proto::kMaxPacketPagesLimit;
    opt.max_packet_pages = proto::kMaxPacketPagesLimit;
    opt.zero_pages = false;  // every page's bytes travel
    ServingReceiver rx(opt, {dst.region});
    opt.port = rx.port();
    auto sender = Sender::Connect(opt, {&src.region, 1});
    ASSERT_OK(sender);
    DirtyBitmap dirty(src.region.page_count());
    dirty.SetAll();
    DirtyBitmap* bitmaps[] = {&dirty};
    ASSERT_OK((*sender)->SendRound(bitmaps));
    // Then every seventh page: sparse packets, each page its own run.
    for (uint64_t p = 0; p < src.region.page_count(); p += 7) {
      static_cast<uint8_t*>(src.region.page(p))[5] ^= 0xff;
      dirty.Set(p);
    }
    ASSERT_OK((*sender)->SendRound(bitmaps));
    ASSERT_OK((*sender)->Finish());
    ASSERT_OK(rx.result());
    EXPECT_TRUE(SameBytes(src.region, dst.region));
    const ChannelStats sent = (*sender)->stats().Total();
    EXPECT_EQ(rx.receiver().stats().Total().sealed_bytes, sent.sealed_bytes);
    EXPECT_EQ(sent.sealed_bytes, sent.payload_bytes + sent.header_bytes);
  }
}

// Huge pages under protection (review A3): a sealing source copies a
// payload to seal it, so it cuts its packets at kMaxStagedPayloadBytes
// (four 2 MiB pages here; 128 pages would have been 256 MiB a copy, four
// copies a channel), and refuses up front a page larger than that, which
// an unprotected stream still moves.
TEST(ProtectLimitsTest, HugePagesAreSealedFromBoundedCopies) {
  const uint64_t huge = 2ull << 20;
  const uint64_t bytes =
      std::max<uint64_t>(ScaledBytes(64ull << 20), 16 * huge);
  auto src = MakeRegion(1, bytes, /*seed=*/4, /*fill=*/true);
  auto dst = MakeRegion(1, bytes);
  src.region.page_size = static_cast<uint32_t>(huge);
  dst.region.page_size = static_cast<uint32_t>(huge);
  SessionOptions opt = Keyed(Protection::kMac);
  opt.channels = 2;
  {
    ServingReceiver rx(opt, {dst.region});
    SessionOptions o = opt;
    o.port = rx.port();
    auto sender = Sender::Connect(o, {&src.region, 1});
    ASSERT_OK(sender);
    DirtyBitmap dirty(src.region.page_count());
    dirty.SetAll();
    DirtyBitmap* bitmaps[] = {&dirty};
    ASSERT_OK((*sender)->SendRound(bitmaps));
    ASSERT_OK((*sender)->Finish());
    ASSERT_OK(rx.result());
    EXPECT_TRUE(SameBytes(src.region, dst.region));
    const ChannelStats sent = (*sender)->stats().Total();
    EXPECT_EQ(sent.pages, src.region.page_count());
    EXPECT_LE(sent.pages,
              sent.packets * (engine::kMaxStagedPayloadBytes / huge));
  }
  // A page over the bound: refused when sealed, with what to do.
  src.region.page_size = static_cast<uint32_t>(8 * huge);
  dst.region.page_size = static_cast<uint32_t>(8 * huge);
  for (Protection protect : {Protection::kMac, Protection::kNone}) {
    SCOPED_TRACE(ProtectionName(protect));
    SessionOptions o = protect == Protection::kNone ? testing::InsecureOptions()
                                                    : Keyed(protect);
    if (protect == Protection::kMac) {
      // Both ends, before a connection is made.
      auto listening = Receiver::Listen(o, {&dst.region, 1});
      ASSERT_THAT(
          listening,
          StatusIs(
              absl::StatusCode::kInvalidArgument,
              HasSubstr("a protected stream seals a copy of each packet")));
      EXPECT_THAT(std::string(listening.status().message()),
                  HasSubstr("16777216-byte pages"));
      auto sender = Sender::Connect(o, {&src.region, 1});
      ASSERT_THAT(
          sender,
          StatusIs(
              absl::StatusCode::kInvalidArgument,
              HasSubstr("a protected stream seals a copy of each packet")));
      EXPECT_THAT(std::string(sender.status().message()),
                  HasSubstr("16777216-byte pages"));
      continue;
    }
    ServingReceiver rx(o, {dst.region});
    o.port = rx.port();
    auto sender = Sender::Connect(o, {&src.region, 1});
    ASSERT_OK(sender);
    DirtyBitmap dirty(src.region.page_count());
    dirty.SetAll();
    DirtyBitmap* bitmaps[] = {&dirty};
    ASSERT_OK((*sender)->SendRound(bitmaps));
    ASSERT_OK((*sender)->Finish());
    ASSERT_OK(rx.result());
    EXPECT_TRUE(SameBytes(src.region, dst.region));
  }
}

// Frozen memory (Sender::NoteMemoryFrozen before round 0, as a migration
// with no workload does): every mac payload is sealed where its pages are,
// no staging copy, and Verify (kFull) takes the digests recorded as the
// pages went. Zero pages, never-touched ranges and data in one region;
// byte exact and verified. Encrypt still seals into a copy (its bytes
// change on the way).
TEST(ProtectFrozenTest, FrozenMemoryIsSealedInPlaceAndVerifiedAsItWent) {
  for (Protection protect : {Protection::kMac, Protection::kEncrypt}) {
    SCOPED_TRACE(ProtectionName(protect));
    const uint64_t bytes = ScaledBytes(32ull << 20);
    auto src = MakeRegion(1, bytes, /*seed=*/21, /*fill=*/true);
    std::memset(src.region.page(0), 0, bytes / 4);  // zero pages
    auto dst = MakeRegion(1, bytes);
    SessionOptions opt = Keyed(protect);
    opt.channels = 2;
    ServingReceiver rx(opt, {dst.region});
    opt.port = rx.port();
    auto sender = Sender::Connect(opt, {&src.region, 1});
    ASSERT_OK(sender);
    (*sender)->NoteMemoryFrozen();
    DirtyBitmap dirty(src.region.page_count());
    dirty.SetAll();
    DirtyBitmap* bitmaps[] = {&dirty};
    ASSERT_OK((*sender)->SendRound(bitmaps));
    absl::StatusOr<VerifyReport> v = (*sender)->Verify();
    ASSERT_OK(v);
    EXPECT_TRUE(v->ok()) << v->pages_mismatched;
    EXPECT_EQ(v->pages_checked, src.region.page_count());
    ASSERT_OK((*sender)->Finish());
    ASSERT_OK(rx.result());
    EXPECT_TRUE(SameBytes(src.region, dst.region));
    const ChannelStats sent = (*sender)->stats().Total();
    EXPECT_EQ(sent.sealed_in_place_bytes,
              protect == Protection::kMac ? sent.payload_bytes : 0u);
    EXPECT_GT(sent.payload_bytes, 0u);
    EXPECT_EQ(rx.receiver().stats().Total().sealed_bytes, sent.sealed_bytes);
  }
}

// A write the dirty tracking missed before the memory froze (a page
// written without its dirty bit) is not sent again, so Verify reads it
// again rather than trusting a digest taken as it went, and reports it.
// The rounds before the freeze seal from a copy.
TEST(ProtectFrozenTest, AWriteMissedBeforeTheFreezeIsStillFound) {
  const uint64_t bytes = ScaledBytes(8ull << 20);
  auto src = MakeRegion(1, bytes, /*seed=*/22, /*fill=*/true);
  auto dst = MakeRegion(1, bytes);
  SessionOptions opt = Keyed(Protection::kMac);
  opt.channels = 2;
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  ASSERT_OK((*sender)->SendRound(bitmaps));
  EXPECT_EQ((*sender)->stats().Total().sealed_in_place_bytes, 0u);
  static_cast<uint8_t*>(src.region.page(3))[100] ^= 0x5a;  // missed
  static_cast<uint8_t*>(src.region.page(9))[7] ^= 0x11;    // tracked
  dirty.Set(9);
  (*sender)->NoteMemoryFrozen();
  ASSERT_OK((*sender)->SendRound(bitmaps));
  EXPECT_GT((*sender)->stats().Total().sealed_in_place_bytes, 0u);
  absl::StatusOr<VerifyReport> v = (*sender)->Verify();
  ASSERT_OK(v);
  EXPECT_EQ(v->pages_mismatched, 1u);
  ASSERT_FALSE(v->first_mismatches.empty());
  EXPECT_EQ(v->first_mismatches[0].second, 3u);
  ASSERT_OK((*sender)->Finish());
}

// Memory the source never touched goes as ZERO_RANGES packets, header
// only, each announcing the header after it: a sealed stream reads that
// next header whole at the packet boundary, and must not read it again.
TEST(ProtectLimitsTest, UntouchedRangesBetweenDataGoSealed) {
  for (Protection protect : {Protection::kMac, Protection::kEncrypt}) {
    SCOPED_TRACE(ProtectionName(protect));
    const uint64_t bytes = ScaledBytes(64ull << 20);
    auto src = MakeRegion(1, bytes);  // never touched
    auto dst = MakeRegion(1, bytes);
    // One written page in every four: the rest stay untouched runs.
    for (uint64_t p = 0; p < src.region.page_count(); p += 4) {
      static_cast<uint8_t*>(src.region.page(p))[p % 4096] = 0x5a;
    }
    SessionOptions opt = Keyed(protect);
    opt.channels = 2;
    ServingReceiver rx(opt, {dst.region});
    opt.port = rx.port();
    auto sender = Sender::Connect(opt, {&src.region, 1});
    ASSERT_OK(sender);
    DirtyBitmap dirty(src.region.page_count());
    dirty.SetAll();
    DirtyBitmap* bitmaps[] = {&dirty};
    absl::Status s = (*sender)->SendRound(bitmaps).status();
    ASSERT_OK(s);
    ASSERT_OK((*sender)->Finish());
    ASSERT_OK(rx.result());
    EXPECT_TRUE(SameBytes(src.region, dst.region));
    EXPECT_GT((*sender)->stats().Total().zero_range_packets, 10u);
  }
}

// One round of a small region; the status the sender got.
absl::Status OneRound(SessionOptions source, SessionOptions destination) {
  auto src = MakeRegion(1, 1 << 20, 3, true);
  auto dst = MakeRegion(1, 1 << 20);
  ServingReceiver rx(destination, {dst.region});
  source.port = rx.port();
  auto sender = Sender::Connect(source, {&src.region, 1});
  if (!sender.ok()) {
    rx.receiver().Abort(absl::CancelledError("test over"));
    rx.result().IgnoreError();
    return sender.status();
  }
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  absl::Status s = (*sender)->SendRound(bitmaps).status();
  if (s.ok()) s = (*sender)->Finish();
  if (s.ok()) s = rx.result();
  if (s.ok() && !SameBytes(src.region, dst.region)) {
    s = absl::DataLossError("destination differs");
  }
  if (!s.ok()) {
    rx.receiver().Abort(absl::CancelledError("test over"));
    rx.result().IgnoreError();
  }
  return s;
}

TEST(ProtectNegotiationTest, TheDestinationRefusesLessThanItWants) {
  absl::Status s =
      OneRound(Keyed(Protection::kNone), Keyed(Protection::kEncrypt));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(s.message(), HasSubstr("requires protect = encrypt"));
  // The option's name, and the tool's flag beside it.
  EXPECT_THAT(s.message(), HasSubstr("(--protect=encrypt)"));
  s = OneRound(Keyed(Protection::kMac), Keyed(Protection::kEncrypt));
  EXPECT_THAT(s.message(), HasSubstr("the source asked for mac"));
}

TEST(ProtectNegotiationTest, MoreThanTheDestinationWantsIsGranted) {
  EXPECT_OK(OneRound(Keyed(Protection::kEncrypt), Keyed(Protection::kMac)));
  EXPECT_OK(OneRound(Keyed(Protection::kMac), Keyed(Protection::kNone)));
  // Auto is mac with a key, on both ends.
  EXPECT_OK(OneRound(Keyed(Protection::kAuto), Keyed(Protection::kMac)));
  absl::Status s = OneRound(Keyed(Protection::kNone), Keyed(Protection::kAuto));
  EXPECT_THAT(s.message(), HasSubstr("requires protect = mac"));
}

TEST(ProtectNegotiationTest, NoKeyIsRefusedUnlessAskedForExplicitly) {
  const auto dst = MakeRegion(1, 1 << 20);
  SessionOptions bare;  // no key, not insecure: the library's default
  absl::StatusOr<std::unique_ptr<Receiver>> r =
      Receiver::Listen(bare, {&dst.region, 1});
  ASSERT_THAT(r, StatusIs(absl::StatusCode::kFailedPrecondition,
                          HasSubstr("give both ends the same pre-shared key")));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("--insecure"));
  auto src = MakeRegion(1, 1 << 20, 1, true);
  absl::StatusOr<std::unique_ptr<Sender>> s =
      Sender::Connect(bare, {&src.region, 1});
  ASSERT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition,
                          HasSubstr("give both ends the same pre-shared key")));
  EXPECT_THAT(s.status().message(), HasSubstr("no key"));
  EXPECT_OK(OneRound(testing::InsecureOptions(), testing::InsecureOptions()));
}

TEST(ProtectNegotiationTest, ProtectionNeedsAKeyAndATransportThatCarriesIt) {
  SessionOptions o = testing::InsecureOptions();
  o.protect = Protection::kMac;
  EXPECT_THAT(ValidateOptions(o).message(), HasSubstr("needs a key"));
  o = Keyed(Protection::kEncrypt);
  o.transport = TransportKind::kRdma;
  const absl::Status s = ValidateOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_THAT(s.message(), HasSubstr("not available on rdma"));
  EXPECT_EQ(ParseProtection("mac").value(), Protection::kMac);
  EXPECT_THAT(ParseProtection("tls"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown protection 'tls'")));
}

}  // namespace
}  // namespace ramferry
