// Delta-encoded re-sends (SessionOptions::delta) end to end on loopback: a
// real Sender and Receiver, a writer storing 8 bytes at a time into a hot
// set of pages while rounds run (and now and then zeroing a page or
// rewriting one whole), on every socket transport, unprotected, signed and
// encrypted, with and without compression, on one channel and several.
// The destination must end byte-identical, the deltas must have carried
// most re-sent pages, and both ends must count the same records.
#include <atomic>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "channels/transport.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/packet.h"
#include "proto/page_delta.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/fake_source.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/transport_selection.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;
using testing::MakeRegion;
using testing::SameBytes;
using testing::ServingReceiver;

constexpr uint64_t kBytes = 16ull << 20;  // 4096 pages
constexpr uint64_t kHotPages = 512;

// Stores 8 random bytes at a random place of a hot page, and marks it
// dirty; one store in 64 zeroes its page, one in 64 rewrites it whole. Not
// instrumented for TSan, like memload's writers: the engine reads pages
// being written by design.
class SmallWriter {
 public:
  SmallWriter(const Region& r, DirtyBitmap* dirty) : r_(r), dirty_(dirty) {}
  ~SmallWriter() { Stop(); }
  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // Returns once the writer stored `n` more times: rounds that find
  // nothing dirty (a writer starved of CPU) would leave no page to send
  // twice, and so none as a delta.
  void AwaitStores(uint64_t n) {
    const uint64_t until = stores_.load() + n;
    while (stores_.load() < until) std::this_thread::yield();
  }

 private:
  __attribute__((no_sanitize("thread"))) void Run() {
    std::mt19937_64 rng(17);
    while (!stop_.load(std::memory_order_relaxed)) {
      const uint64_t p = rng() % kHotPages;
      auto* words = reinterpret_cast<volatile uint64_t*>(r_.page(p));
      const uint64_t kind = rng() % 64;
      const uint64_t v = rng();
      if (kind == 0) {
        for (size_t w = 0; w < r_.page_size / 8; ++w) words[w] = 0;
      } else if (kind == 1) {
        for (size_t w = 0; w < r_.page_size / 8; ++w) words[w] = v * w;
      } else {
        words[v % (r_.page_size / 8)] = rng();
      }
      dirty_->Set(p);
      stores_.fetch_add(1, std::memory_order_relaxed);
      // A live workload, not a spin: rounds get a chance to send.
      if (rng() % 16 == 0) std::this_thread::yield();
    }
  }
  const Region& r_;
  DirtyBitmap* const dirty_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> stores_{0};
  std::thread thread_;
};

SessionOptions Options(TransportKind kind, Protection protect,
                       Compression compression, uint32_t channels) {
  SessionOptions o = ::ramferry::testing::InsecureOptions();
  if (protect != Protection::kNone) {
    o.insecure = false;
    o.auth_key = "delta-test-key-0123456789abcdef!";
    o.protect = protect;
  }
  o.transport = kind;
  o.channels = channels;
  o.header_slots = 32;  // the staging buffers rotate under a wrapping array
  o.compression = compression;
  o.delta = Delta::kOn;
  return o;
}

class DeltaTest
    : public ::testing::TestWithParam<
          std::tuple<TransportKind, Protection, Compression, uint32_t>> {};

TEST_P(DeltaTest, LiveRoundsEndByteIdenticalWithReSentPagesAsDeltas) {
  const auto [kind, protect, compression, channels] = GetParam();
  if (std::string why = testing::WhyUnavailable(kind); !why.empty()) {
    GTEST_SKIP() << why;
  }
  auto src = MakeRegion(1, kBytes, /*seed=*/3, /*fill=*/true);
  auto dst = MakeRegion(1, kBytes);
  SessionOptions opt = Options(kind, protect, compression, channels);
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);

  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  SmallWriter writer(src.region, &dirty);
  writer.Start();
  for (int round = 0; round < 6; ++round) {
    // 256 stores over 512 hot pages between rounds: pages re-sent in two
    // rounds, the second time as deltas.
    if (round > 0) writer.AwaitStores(256);
    ASSERT_OK((*sender)->SendRound(bitmaps).status());
  }
  writer.Stop();
  ASSERT_OK((*sender)->SendRound(bitmaps).status());  // paused: the last
  absl::StatusOr<VerifyReport> v = (*sender)->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok()) << v->pages_mismatched << " pages differ";
  ASSERT_OK((*sender)->Finish());
  ASSERT_OK(rx.result());
  EXPECT_TRUE(SameBytes(src.region, dst.region));

  const ChannelStats sent = (*sender)->stats().Total();
  const ChannelStats got = rx.receiver().stats().Total();
  EXPECT_GT(sent.delta_pages, 0u);
  EXPECT_GT(sent.delta_cache_hits, 0u);
  EXPECT_EQ(got.delta_pages, sent.delta_pages);
  EXPECT_EQ(got.delta_record_bytes, sent.delta_record_bytes);
  // Stores into a page between its sends: records far smaller than it.
  EXPECT_LT(sent.delta_record_bytes, sent.delta_pages * 4096 / 4);
  // The first send of a page fills the cache: round 0 took none of it.
  EXPECT_LE(sent.delta_cache_hits + sent.delta_cache_misses,
            sent.pages - src.region.page_count());
  if (protect != Protection::kNone) {
    EXPECT_EQ(sent.sealed_bytes, sent.payload_bytes + sent.header_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Matrix, DeltaTest,
    ::testing::Combine(::testing::ValuesIn(testing::TransportsWith(
                           0, channels::kCapRemotePlacement)),
                       ::testing::Values(Protection::kNone, Protection::kMac,
                                         Protection::kEncrypt),
                       ::testing::Values(Compression::kOff, Compression::kOn),
                       ::testing::Values(1u, 4u)),
    [](const auto& info) {
      return absl::StrCat(testing::TestName(std::get<0>(info.param)), "_",
                          ProtectionName(std::get<1>(info.param)), "_zstd_",
                          CompressionName(std::get<2>(info.param)), "_x",
                          std::get<3>(info.param));
    });

// Five rounds of a session with `opt` over a `bytes` region, on this
// thread: round 0 sends everything, and before each later one `stores`
// 8-byte stores go into the pages `page_of(i, rng)` picks for store i. The
// end must be byte-identical; `sent` gets the source's totals.
// `page_size` is the region's tracking page; `warnings` (null: not
// wanted) gets the source's.
void StoreRounds(
    SessionOptions opt, uint64_t bytes, uint64_t stores,
    const std::function<uint64_t(uint64_t, std::mt19937_64&)>& page_of,
    ChannelStats* sent, uint32_t page_size = 4096,
    std::vector<std::string>* warnings = nullptr) {
  auto src = MakeRegion(1, bytes, /*seed=*/4, /*fill=*/true);
  auto dst = MakeRegion(1, bytes);
  src.region.page_size = dst.region.page_size = page_size;
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);
  if (warnings != nullptr) *warnings = (*sender)->warnings();
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  std::mt19937_64 rng(8);
  for (int round = 0; round < 5; ++round) {
    for (uint64_t i = 0; round > 0 && i < stores; ++i) {
      const uint64_t p = page_of(i, rng);
      const uint64_t v = rng();
      std::memcpy(src.region.page(p) + (v % (page_size / 8)) * 8, &v, 8);
      dirty.Set(p);
    }
    ASSERT_OK((*sender)->SendRound(bitmaps).status());
  }
  ASSERT_OK((*sender)->Finish());
  ASSERT_OK(rx.result());
  EXPECT_TRUE(SameBytes(src.region, dst.region));
  *sent = (*sender)->stats().Total();
}

// The cache smaller than the pages re-sent over the rounds, on one channel
// (so pages are pinned and sent in page order): 100 hot pages at the
// region's end, stored into every round, and 100 cold stores a round
// spread below them. Each round's cold pages evict the least recently
// sent copies, older cold ones; the hot ones, sent last, hit. The source's
// bytes either way.
TEST(DeltaSessionTest, ACacheSmallerThanTheDirtyPagesEvictsAndStaysExact) {
  SessionOptions opt =
      Options(TransportKind::kTcp, Protection::kNone, Compression::kOff, 1);
  opt.delta_cache_bytes = 1 << 20;  // 256 pages, for 200 a round
  ChannelStats sent;
  ASSERT_NO_FATAL_FAILURE(StoreRounds(
      opt, kBytes, 200,
      [](uint64_t i, std::mt19937_64& rng) {
        return i < 100 ? 924 + i : rng() % 924;
      },
      &sent));
  EXPECT_GT(sent.delta_cache_evictions, 0u);
  // Rounds 2 to 4: the hot pages as records.
  EXPECT_GE(sent.delta_pages, 3 * 100u);
}

// auto on a link held to 20 MB/s: the link, not the encoding, is the
// bottleneck, so the channels encode.
TEST(DeltaSessionTest, AutoEncodesWhereTheLinkIsTheBottleneck) {
  constexpr uint64_t kPages = 1024;
  SessionOptions opt =
      Options(TransportKind::kTcp, Protection::kNone, Compression::kOff, 2);
  opt.delta = Delta::kAuto;
  opt.max_bandwidth = 20'000'000;
  opt.packet_pages = 16;
  ChannelStats sent;
  ASSERT_NO_FATAL_FAILURE(StoreRounds(
      opt, kPages * 4096, kPages,
      [](uint64_t i, std::mt19937_64&) { return i; }, &sent));
  // Rounds 2 to 4 re-send every page; most go as deltas.
  EXPECT_GT(sent.delta_pages, kPages);
}

// Review F7: with --delta=auto, pages larger than the cache go whole, with
// a warning that says why; the session does not fail.
TEST(DeltaSessionTest, AutoSendsPagesLargerThanTheCacheWhole) {
  SessionOptions opt =
      Options(TransportKind::kTcp, Protection::kNone, Compression::kOff, 1);
  opt.delta = Delta::kAuto;
  opt.delta_cache_bytes = 1 << 20;
  ChannelStats sent;
  std::vector<std::string> warnings;
  ASSERT_NO_FATAL_FAILURE(StoreRounds(
      opt, 8 << 20, 4, [](uint64_t i, std::mt19937_64&) { return i; }, &sent,
      2 << 20, &warnings));
  EXPECT_EQ(sent.delta_pages, 0u);
  EXPECT_THAT(warnings, ::testing::Contains(::testing::AllOf(
                            HasSubstr("2097152-byte pages"),
                            HasSubstr("1048576"), HasSubstr("whole"))));
}

// With --delta=on the same is refused before a connection is made, with
// the page size, the cache's size and what to do.
TEST(DeltaSessionTest, OnIsRefusedWherePagesAreLargerThanTheCache) {
  SessionOptions opt =
      Options(TransportKind::kTcp, Protection::kNone, Compression::kOff, 1);
  opt.delta_cache_bytes = 1 << 20;
  opt.port = 1;  // nothing listens: the refusal comes first
  opt.connect_timeout = absl::Seconds(1);
  auto src = MakeRegion(1, 8 << 20);
  src.region.page_size = 2 << 20;
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_THAT(sender, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("no region can send deltas")));
  EXPECT_THAT(
      sender.status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               ::testing::AllOf(
                   HasSubstr("2097152-byte pages"), HasSubstr("1048576"),
                   HasSubstr("delta_cache_bytes"), HasSubstr("delta = auto"))));
}

// Review F8: huge pages as deltas, sealed or not, on or auto: every packet
// of the session carries at most proto::kMaxDeltaPayloadBytes of pages
// (4 of 2 MiB; 128, as asked, would stage 256 MiB a packet), and the end
// is byte-identical.
class HugeDeltaTest
    : public ::testing::TestWithParam<std::tuple<Delta, Protection>> {};

TEST_P(HugeDeltaTest, HugePagesGoInBoundedPackets) {
  const auto [delta, protect] = GetParam();
  constexpr uint32_t kHuge = 2 << 20;
  SessionOptions opt =
      Options(TransportKind::kTcp, protect, Compression::kOff, 1);
  opt.delta = delta;
  opt.delta_cache_bytes = 16 << 20;  // every page
  ChannelStats sent;
  ASSERT_NO_FATAL_FAILURE(StoreRounds(
      opt, 8 * uint64_t{kHuge}, 8,
      [](uint64_t i, std::mt19937_64&) { return i; }, &sent, kHuge));
  EXPECT_LE(sent.pages * kHuge, sent.packets * (8u << 20));
  if (delta == Delta::kOn) {
    EXPECT_GT(sent.delta_pages, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Huge, HugeDeltaTest,
    ::testing::Combine(::testing::Values(Delta::kOn, Delta::kAuto),
                       ::testing::Values(Protection::kNone, Protection::kMac)),
    [](const auto& info) {
      return absl::StrCat(DeltaName(std::get<0>(info.param)), "_",
                          ProtectionName(std::get<1>(info.param)));
    });

// The largest page the destination accepts (1 GiB), with a cache that
// holds it: a delta packet of one such page would stage 1 GiB, and its
// records' buffer 512 MiB a page. auto sends the pages whole and says so;
// on is refused and says what to do. Nothing is sent: the memory is never
// touched.
TEST(DeltaSessionTest, PagesOverTheDeltaBoundGoWholeOrAreRefused) {
  constexpr uint32_t kGiB = 1u << 30;
  auto src = MakeRegion(1, kGiB);
  auto dst = MakeRegion(1, kGiB);
  src.region.page_size = dst.region.page_size = kGiB;
  SessionOptions opt =
      Options(TransportKind::kTcp, Protection::kNone, Compression::kOff, 1);
  opt.delta_cache_bytes = kGiB;
  // No arrival digests: the destination's digest of a zero page would
  // hash a zeroed 1 GiB buffer (engine/verify.cc).
  opt.verify = VerifyMode::kReread;
  {
    SessionOptions on = opt;
    on.port = 1;
    on.connect_timeout = absl::Seconds(1);
    auto sender = Sender::Connect(on, {&src.region, 1});
    ASSERT_THAT(sender, StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("no region can send deltas")));
    EXPECT_THAT(sender.status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("1073741824-byte pages"),
                                          HasSubstr("8388608"))));
  }
  opt.delta = Delta::kAuto;
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);
  EXPECT_THAT((*sender)->warnings(),
              ::testing::Contains(::testing::AllOf(
                  HasSubstr("1073741824-byte pages"), HasSubstr("whole"))));
  ASSERT_OK((*sender)->Finish());
  ASSERT_OK(rx.result());
}

// Review F8, the destination: a forged header whose entries name the
// largest records their pages allow (16 of 1 MiB at 2 MiB pages, one of
// 512 MiB at 1 GiB pages) is refused before a buffer is sized by it, with
// the bound: its records would be read aside before the tag is checked.
class ForgedRecordsTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(ForgedRecordsTest, AHeaderAskingForHugeRecordsIsRefusedFirst) {
  const uint32_t page_size = GetParam();
  // 16 records of 1 MiB: twice the bound.
  const uint32_t pages = page_size == (1u << 30) ? 1 : 16;
  const uint64_t bytes = uint64_t{page_size} * pages;
  auto dst = MakeRegion(1, bytes);
  dst.region.page_size = page_size;
  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  opt.channels = 1;
  ServingReceiver rx(opt, {dst.region});
  testing::FakeSource src(rx.port(), 1, 128);
  // No arrival digests: the destination's digest of a zero page would
  // hash a zeroed 1 GiB buffer (engine/verify.cc).
  src.set_capabilities(proto::kKnownFeatures &
                       ~(proto::kFeatureSurviveChannelLoss |
                         proto::kFeatureSealMac | proto::kFeatureSealEncrypt |
                         proto::kFeaturePostcopyResume |
                         proto::kFeatureArrivalDigests));
  const proto::RegionInfo table[] = {{1, page_size, bytes, "huge"}};
  ASSERT_OK(src.OpenControl(table));
  ASSERT_OK(src.OpenAllChannels());
  proto::PacketHeader h;
  h.region_id = 1;
  h.page_size = page_size;
  h.page_count = pages;
  std::vector<uint64_t> entries;
  for (uint32_t i = 0; i < pages; ++i) {
    entries.push_back(proto::DeltaPageEntry(uint64_t{i} * page_size,
                                            proto::MaxDeltaBytes(page_size)));
  }
  std::vector<uint8_t> packet(proto::PacketHeaderBytes(pages));
  proto::EncodePacketHeader(h, entries, absl::MakeSpan(packet));
  // No payload follows: the header alone must be refused.
  (void)src.Send(0, packet);
  src.CloseChannel(0);
  const absl::Status s = rx.result();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          ::testing::AllOf(HasSubstr("channel 0"),
                                           HasSubstr("delta records"),
                                           HasSubstr("8388608"))));
  if (pages > 1) {
    EXPECT_TRUE(testing::AllZero(dst.region));
  }
}

INSTANTIATE_TEST_SUITE_P(PageSizes, ForgedRecordsTest,
                         ::testing::Values(2u << 20, 1u << 30));

TEST(DeltaSessionTest, DeltaOnIsRefusedOnRdmaWithTheReason) {
  SessionOptions opt =
      Options(TransportKind::kRdma, Protection::kNone, Compression::kOff, 1);
  EXPECT_THAT(ValidateOptions(opt),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("nothing applies a delta")));
  opt.delta = Delta::kAuto;
  EXPECT_OK(ValidateOptions(opt));
}

}  // namespace
}  // namespace ramferry
