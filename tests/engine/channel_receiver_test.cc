// ChannelReceiver's per-packet state machine driven without sockets, over a
// MemoryTransport that serves exact bytes: what a packet writes where, what
// a SYNC reports, and how the end of the stream is reported. The channel
// fuzzer (tests/fuzz/channel_receiver_fuzzer.cc) relies on these behaviours.
#include "engine/channel_receiver.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/compress/compressor.h"
#include "engine/failure.h"
#include "engine/page_placer.h"
#include "engine/pages/unauthentic_pages.h"
#include "engine/pages/zero_pages.h"
#include "engine/region_table.h"
#include "engine/round_barrier.h"
#include "engine/verify.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/packet.h"
#include "proto/seal.h"
#include "proto/stream.h"
#include "proto/wire.h"
#include "tests/support/memory_transport.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry::engine {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr uint32_t kChannel = 2;
constexpr uint32_t kMaxPages = 8;

std::vector<uint8_t> Header(const proto::PacketHeader& h,
                            const std::vector<uint64_t>& offsets) {
  std::vector<uint8_t> out(proto::PacketHeaderBytes(h.page_count));
  proto::EncodePacketHeader(h, offsets, absl::MakeSpan(out));
  return out;
}

// The header of packet `num` of `round` on kChannel naming region 1
// (4 KiB pages) and `words` words.
proto::PacketHeader RegionHeader(uint16_t flags, uint64_t num, uint64_t round,
                                 size_t words) {
  proto::PacketHeader h;
  h.flags = flags;
  h.channel = kChannel;
  h.packet_num = num;
  h.round = round;
  h.region_id = 1;
  h.page_size = 4096;
  h.page_count = static_cast<uint32_t>(words);
  return h;
}

void AppendHeader(std::vector<uint8_t>* s, const proto::PacketHeader& h,
                  const std::vector<uint64_t>& words) {
  std::vector<uint8_t> b = Header(h, words);
  s->insert(s->end(), b.begin(), b.end());
}

void AppendData(std::vector<uint8_t>* s, uint64_t num, uint64_t round,
                const std::vector<uint64_t>& offsets, uint8_t fill,
                uint32_t next_header_bytes = 0) {
  proto::PacketHeader h =
      RegionHeader(proto::kPacketData, num, round, offsets.size());
  h.next_header_bytes = next_header_bytes;
  AppendHeader(s, h, offsets);
  s->insert(s->end(), 4096 * offsets.size(), fill);
}

void AppendMarker(std::vector<uint8_t>* s, uint16_t flags, uint64_t num,
                  uint64_t round, uint32_t next_header_bytes = 0) {
  proto::PacketHeader h;
  h.next_header_bytes = next_header_bytes;
  h.flags = flags;
  h.channel = kChannel;
  h.packet_num = num;
  h.round = round;
  std::vector<uint8_t> b = Header(h, {});
  s->insert(s->end(), b.begin(), b.end());
}

// Data packet `num` of `round` whose entries may carry kZeroPageFlag:
// only the pages without it have bytes (`fill`) in the payload.
void AppendWithZeros(std::vector<uint8_t>* s, uint64_t num, uint64_t round,
                     const std::vector<uint64_t>& entries, uint8_t fill) {
  AppendHeader(s, RegionHeader(proto::kPacketData, num, round, entries.size()),
               entries);
  for (uint64_t e : entries) {
    if (!proto::IsZeroPageEntry(e)) s->insert(s->end(), 4096, fill);
  }
}

void AppendZeroRanges(std::vector<uint8_t>* s, uint64_t num, uint64_t round,
                      const std::vector<uint64_t>& words) {
  AppendHeader(s,
               RegionHeader(proto::kPacketZeroRanges, num, round, words.size()),
               words);
}

// A data packet whose payload is `frame`, said to be `compressed_bytes`
// long (the frame's size unless a test lies).
void AppendCompressed(std::vector<uint8_t>* s, uint64_t num, uint64_t round,
                      const std::vector<uint64_t>& offsets,
                      const std::vector<uint8_t>& frame,
                      uint32_t compressed_bytes = 0) {
  proto::PacketHeader h =
      RegionHeader(proto::kPacketData, num, round, offsets.size());
  h.compressed_bytes = compressed_bytes != 0
                           ? compressed_bytes
                           : static_cast<uint32_t>(frame.size());
  AppendHeader(s, h, offsets);
  s->insert(s->end(), frame.begin(), frame.end());
}

// A frame of `pages` pages of text, compressed as the source does.
std::vector<uint8_t> TextFrame(size_t pages, std::vector<uint8_t>* text) {
  text->clear();
  const char* w = "ramferry moves pages ";
  while (text->size() < pages * 4096) text->insert(text->end(), w, w + 21);
  text->resize(pages * 4096);
  std::vector<iovec> runs;
  for (size_t i = 0; i < pages; ++i)
    runs.push_back({text->data() + i * 4096, 4096});
  std::vector<uint8_t> frame(kMaxCompressedPayload);
  auto c = PacketCompressor::Create(1);
  EXPECT_OK(c);
  frame.resize((*c)->Compress(runs, absl::MakeSpan(frame)));
  EXPECT_GT(frame.size(), 0u);
  return frame;
}

// ReceiveOne until it fails or reads FINISH; the last result.
absl::StatusOr<ChannelReceiver::Step> RunAll(ChannelReceiver& rx) {
  while (true) {
    absl::StatusOr<ChannelReceiver::Step> step = rx.ReceiveOne();
    if (!step.ok() || *step == ChannelReceiver::Step::kFinished) return step;
  }
}

uint8_t ByteAt(const testing::TestRegion& r, uint64_t offset) {
  return static_cast<const uint8_t*>(r.region.base)[offset];
}

// One 4-page region (filled with `prefill`, and known to read as zero when
// `reads_as_zero`) and a receiver on channel kChannel reading `stream`,
// with kFeatureZeroPages when `zero_pages` and kFeatureCompressedPages when
// `compressed`.
struct Fixture {
  explicit Fixture(const std::vector<uint8_t>& bytes,
                   bool next_header_size = false, bool zero_pages = false,
                   bool reads_as_zero = false, uint8_t prefill = 0,
                   bool compressed = false, PagePlacer* placer = nullptr)
      : stream(bytes),
        region(MakePrefilled(prefill, reads_as_zero)),
        table({&region.region, 1}),
        zero_fill({&region.region, 1}),
        barrier(std::vector<uint32_t>{kChannel},
                [this](uint64_t round, uint64_t pages) {
                  rounds.emplace_back(round, pages);
                  return absl::OkStatus();
                }),
        failure([](const absl::Status&, Origin) {}),
        rx(kChannel, std::make_unique<testing::MemoryTransport>(stream), &table,
           {.max_pages = kMaxPages,
            .next_header_size = next_header_size,
            .compressed_pages = compressed,
            .landings = {.zeros = zero_pages ? &zero_fill : nullptr},
            .postcopy = placer},
           &barrier, &failure) {}

  static testing::TestRegion MakePrefilled(uint8_t prefill,
                                           bool reads_as_zero) {
    testing::TestRegion r = testing::MakeRegion(1, 4 * 4096);
    if (prefill != 0) std::memset(r.region.base, prefill, 4 * 4096);
    r.region.reads_as_zero = reads_as_zero;
    return r;
  }

  absl::StatusOr<ChannelReceiver::Step> RunToEnd() { return RunAll(rx); }
  uint8_t byte_at(uint64_t offset) const { return ByteAt(region, offset); }

  std::vector<uint8_t> stream;
  testing::TestRegion region;
  RegionTable table;
  ZeroPages zero_fill;
  std::vector<std::pair<uint64_t, uint64_t>> rounds;
  RoundBarrier barrier;
  SessionFailure failure;
  ChannelReceiver rx;
};

TEST(ChannelReceiverTest, AppliesPagesAndReportsEachRound) {
  std::vector<uint8_t> s;
  AppendData(&s, 0, 0, {4096 * 3, 0}, 0xaa);
  AppendMarker(&s, proto::kPacketSync, 1, 0);
  AppendData(&s, 2, 1, {4096}, 0xbb);
  AppendMarker(&s, proto::kPacketSync, 3, 1);
  AppendMarker(&s, proto::kPacketFinish, 4, 2);
  Fixture f(s);

  absl::StatusOr<ChannelReceiver::Step> end = f.RunToEnd();
  ASSERT_OK(end);
  EXPECT_EQ(*end, ChannelReceiver::Step::kFinished);
  EXPECT_TRUE(f.rx.finished());
  EXPECT_THAT(f.rounds, ElementsAre(Pair(0, 2), Pair(1, 1)));
  // Pages in header order: the first page of the payload is offset 3.
  EXPECT_EQ(f.byte_at(4096 * 3), 0xaa);
  EXPECT_EQ(f.byte_at(0), 0xaa);
  EXPECT_EQ(f.byte_at(4096), 0xbb);
  EXPECT_EQ(f.byte_at(4096 * 2), 0);  // never sent
  ChannelStats stats;
  f.rx.ExportStats(&stats);
  EXPECT_EQ(stats.packets, 2u);
  EXPECT_EQ(stats.pages, 3u);
  EXPECT_EQ(stats.syncs, 2u);
  EXPECT_EQ(stats.finishes, 1u);
}

// Post-copy's side of the seam (engine/page_placer.h), without
// userfaultfd: what the receiver asked of it.
class RecordingPlacer final : public PagePlacer {
 public:
  struct Placed {
    size_t index;
    uint64_t first_page;
    uint64_t pages;
    uint8_t first_byte;  // of the bytes handed over; 0 for zero pages
    bool operator==(const Placed&) const = default;
  };

  bool armed() const override { return armed_; }
  absl::Status BeginLanding() override {
    ++begun;
    if (refuse_landing) {
      return absl::FailedPreconditionError("the switch has begun");
    }
    return absl::OkStatus();
  }
  void EndLanding() override { ++ended; }
  absl::Status Place(size_t index, uint64_t first_page, const uint8_t* src,
                     uint64_t pages) override {
    placed.push_back({index, first_page, pages, src[0]});
    return absl::OkStatus();
  }
  absl::Status PlaceZero(size_t index, uint64_t first_page,
                         uint64_t pages) override {
    zeroed.push_back({index, first_page, pages, 0});
    return absl::OkStatus();
  }

  bool armed_ = false;
  bool refuse_landing = false;
  int begun = 0;
  int ended = 0;
  std::vector<Placed> placed;
  std::vector<Placed> zeroed;
};

// Not armed: each data packet lands by plain writes, inside one
// BeginLanding / EndLanding bracket; nothing is placed.
TEST(ChannelReceiverTest, BeforeTheSwitchEachLandingIsBracketed) {
  std::vector<uint8_t> s;
  AppendData(&s, 0, 0, {4096 * 3, 0}, 0xaa);
  AppendData(&s, 1, 0, {4096}, 0xbb);
  AppendMarker(&s, proto::kPacketSync, 2, 0);
  AppendMarker(&s, proto::kPacketFinish, 3, 1);
  RecordingPlacer placer;
  Fixture f(s, false, false, false, 0, false, &placer);

  ASSERT_OK(f.RunToEnd());
  EXPECT_EQ(placer.begun, 2);
  EXPECT_EQ(placer.ended, 2);
  EXPECT_TRUE(placer.placed.empty());
  EXPECT_EQ(f.byte_at(0), 0xaa);
  EXPECT_EQ(f.byte_at(4096), 0xbb);
}

// A landing the placer refuses (the switch has begun) ends the channel
// with its cause, and writes nothing.
TEST(ChannelReceiverTest, ALandingRefusedByThePlacerWritesNothing) {
  std::vector<uint8_t> s;
  AppendData(&s, 0, 0, {0}, 0xaa);
  AppendMarker(&s, proto::kPacketFinish, 1, 1);
  RecordingPlacer placer;
  placer.refuse_landing = true;
  Fixture f(s, false, false, false, 0, false, &placer);

  absl::StatusOr<ChannelReceiver::Step> end = f.RunToEnd();
  EXPECT_TRUE(absl::IsFailedPrecondition(end.status())) << end.status();
  EXPECT_THAT(end.status().message(), HasSubstr("the switch has begun"));
  EXPECT_EQ(placer.ended, 0);
  EXPECT_EQ(f.byte_at(0), 0);
}

// Armed: every page goes through Place, run by run, from bytes outside
// the region, and zero pages through PlaceZero; the region itself is not
// written and no landing is bracketed.
TEST(ChannelReceiverTest, AfterTheSwitchPagesArePlacedNotWritten) {
  std::vector<uint8_t> s;
  AppendData(&s, 0, 0, {4096 * 2, 4096 * 3, 0}, 0xaa);
  AppendWithZeros(&s, 1, 0, {4096 | proto::kZeroPageFlag}, 0);
  AppendMarker(&s, proto::kPacketSync, 2, 0);
  AppendMarker(&s, proto::kPacketFinish, 3, 1);
  RecordingPlacer placer;
  placer.armed_ = true;
  Fixture f(s, false, /*zero_pages=*/true, false, 0, false, &placer);

  ASSERT_OK(f.RunToEnd());
  using Placed = RecordingPlacer::Placed;
  EXPECT_THAT(placer.placed,
              ElementsAre(Placed{0, 2, 2, 0xaa}, Placed{0, 0, 1, 0xaa}));
  EXPECT_THAT(placer.zeroed, ElementsAre(Placed{0, 1, 1, 0}));
  EXPECT_EQ(placer.begun, 0);
  for (uint64_t page = 0; page < 4; ++page) {
    EXPECT_EQ(f.byte_at(page * 4096), 0) << page;
  }
}

TEST(ChannelReceiverTest, EndOfStreamBeforeFinishIsUnavailable) {
  std::vector<uint8_t> s;
  AppendData(&s, 0, 0, {0}, 0xaa);
  Fixture f(s);

  absl::StatusOr<ChannelReceiver::Step> end = f.RunToEnd();
  EXPECT_TRUE(absl::IsUnavailable(end.status())) << end.status();
  EXPECT_THAT(end.status().message(),
              HasSubstr("closed by peer before FINISH (after packet 1"));
  EXPECT_FALSE(f.rx.finished());
}

TEST(ChannelReceiverTest, EndOfStreamMidPayloadKeepsWhatArrived) {
  std::vector<uint8_t> s;
  AppendData(&s, 0, 0, {4096, 0}, 0xcc);
  s.resize(s.size() - 100);  // the second page never arrives whole
  Fixture f(s);

  absl::StatusOr<ChannelReceiver::Step> end = f.RunToEnd();
  EXPECT_TRUE(absl::IsUnavailable(end.status())) << end.status();
  EXPECT_THAT(end.status().message(), HasSubstr("mid-packet"));
  EXPECT_EQ(f.byte_at(4096 + 4095), 0xcc);
  EXPECT_EQ(f.byte_at(4095 - 100), 0xcc);
  EXPECT_EQ(f.byte_at(4095 - 99), 0);
}

// kFeatureNextHeaderSize: each header names the size of the next, which is
// read with the payload before it; the result is the same stream.
TEST(ChannelReceiverTest, AnnouncedHeadersGiveTheSameResult) {
  std::vector<uint8_t> s;
  AppendData(&s, 0, 0, {4096 * 3, 0}, 0xaa, proto::PacketHeaderBytes(1));
  AppendData(&s, 1, 0, {4096 * 2}, 0xdd, proto::PacketHeaderBytes(0));
  AppendMarker(&s, proto::kPacketSync, 2, 0);  // next unknown: 64 bytes
  AppendData(&s, 3, 1, {4096}, 0xbb, proto::PacketHeaderBytes(0));
  AppendMarker(&s, proto::kPacketSync, 4, 1, proto::PacketHeaderBytes(0));
  AppendMarker(&s, proto::kPacketFinish, 5, 2);
  Fixture f(s, /*next_header_size=*/true);

  absl::StatusOr<ChannelReceiver::Step> end = f.RunToEnd();
  ASSERT_OK(end);
  EXPECT_THAT(f.rounds, ElementsAre(Pair(0, 3), Pair(1, 1)));
  EXPECT_EQ(f.byte_at(4096 * 3), 0xaa);
  EXPECT_EQ(f.byte_at(0), 0xaa);
  EXPECT_EQ(f.byte_at(4096 * 2), 0xdd);
  EXPECT_EQ(f.byte_at(4096), 0xbb);
}

TEST(ChannelReceiverTest, WrongAnnouncementEndsTheChannel) {
  for (uint32_t announced : {proto::PacketHeaderBytes(1),     // too small
                             proto::PacketHeaderBytes(3)}) {  // too big
    std::vector<uint8_t> s;
    AppendData(&s, 0, 0, {0}, 0xaa, announced);
    AppendData(&s, 1, 0, {4096, 8192}, 0xbb);
    AppendMarker(&s, proto::kPacketFinish, 2, 0);
    Fixture f(s, /*next_header_size=*/true);

    absl::StatusOr<ChannelReceiver::Step> end = f.RunToEnd();
    EXPECT_EQ(end.status().code(), absl::StatusCode::kInvalidArgument)
        << end.status();
    // Too big reads into the payload, whose bytes are no header; too small
    // is caught by the size check. Neither writes a byte of packet 1.
    EXPECT_THAT(end.status().message(), HasSubstr("bad packet header"));
    EXPECT_EQ(f.byte_at(4096), 0) << announced;
    EXPECT_EQ(f.byte_at(8192), 0) << announced;
  }
}

TEST(ChannelReceiverTest, AnnouncementWithoutTheCapabilityIsRefused) {
  std::vector<uint8_t> s;
  AppendData(&s, 0, 0, {0}, 0xaa, proto::PacketHeaderBytes(0));
  AppendMarker(&s, proto::kPacketFinish, 1, 0);
  Fixture f(s, /*next_header_size=*/false);

  absl::StatusOr<ChannelReceiver::Step> end = f.RunToEnd();
  EXPECT_EQ(end.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(end.status().message(), HasSubstr("reserved byte"));
  EXPECT_EQ(f.byte_at(0), 0);
}

// Pages are hashed as they land, so a verify answer never reads memory.
TEST(ChannelReceiverTest, ArrivalDigestsAreThoseOfTheLandedPages) {
  std::vector<uint8_t> s;
  AppendData(&s, 0, 0, {4096 * 3, 0, 4096}, 0xaa);
  AppendMarker(&s, proto::kPacketSync, 1, 0);
  AppendData(&s, 2, 1, {4096}, 0xbb);
  AppendMarker(&s, proto::kPacketFinish, 3, 1);
  testing::TestRegion region = testing::MakeRegion(1, 4 * 4096);
  RegionTable table({&region.region, 1});
  absl::StatusOr<std::unique_ptr<DigestTable>> digests =
      DigestTable::Create(table.regions());
  ASSERT_OK(digests);
  RoundBarrier barrier(std::vector<uint32_t>{kChannel},
                       [](uint64_t, uint64_t) { return absl::OkStatus(); });
  SessionFailure failure([](const absl::Status&, Origin) {});
  ChannelReceiver rx(
      kChannel, std::make_unique<testing::MemoryTransport>(s), &table,
      {.max_pages = kMaxPages, .landings = {.digests = digests->get()}},
      &barrier, &failure);
  while (true) {
    absl::StatusOr<ChannelReceiver::Step> step = rx.ReceiveOne();
    ASSERT_OK(step);
    if (*step == ChannelReceiver::Step::kFinished) break;
  }
  std::vector<uint64_t> now(4);
  PageDigests(region.region, 0, absl::MakeSpan(now));
  absl::Span<const uint64_t> landed = (*digests)->region(0);
  EXPECT_EQ(landed[0], now[0]);
  EXPECT_EQ(landed[1], now[1]);  // the round-1 copy, not the round-0 one
  EXPECT_EQ(landed[3], now[3]);
  EXPECT_EQ(landed[2], 0u);  // never sent: no digest
  // Memory changed after landing: the table still says what landed.
  static_cast<uint8_t*>(region.region.base)[0] ^= 1;
  PageDigests(region.region, 0, absl::MakeSpan(now));
  EXPECT_NE(landed[0], now[0]);
}

// kFeatureZeroPages: a zero page is named, not sent; it is made zero where it
// is not, and counted as applied in its round like any page.
TEST(ChannelReceiverTest, ZeroPagesAreZeroFilledWhereTheyAreNot) {
  std::vector<uint8_t> s;
  AppendWithZeros(&s, 0, 0, {0, 4096 | proto::kZeroPageFlag, 4096 * 3}, 0xaa);
  AppendMarker(&s, proto::kPacketSync, 1, 0);
  AppendMarker(&s, proto::kPacketFinish, 2, 1);
  Fixture f(s, false, /*zero_pages=*/true, /*reads_as_zero=*/false,
            /*prefill=*/0x77);
  ASSERT_OK(f.RunToEnd());
  EXPECT_THAT(f.rounds, ElementsAre(Pair(0u, 3u)));
  EXPECT_EQ(f.byte_at(0), 0xaa);
  EXPECT_EQ(f.byte_at(4096), 0);
  EXPECT_EQ(f.byte_at(2 * 4096 - 1), 0);
  EXPECT_EQ(f.byte_at(2 * 4096), 0x77);  // not named: untouched
  EXPECT_EQ(f.byte_at(3 * 4096), 0xaa);
  ChannelStats st;
  f.rx.ExportStats(&st);
  EXPECT_EQ(st.pages, 3u);
  EXPECT_EQ(st.zero_pages, 1u);
  EXPECT_EQ(st.zero_pages_written, 1u);
  EXPECT_EQ(st.payload_bytes, 2u * 4096);
}

// On memory known to read as zero, a zero page for a page no data landed
// on is not written; one for a page data landed on in an earlier round is.
TEST(ChannelReceiverTest, ZeroPagesOnMemoryKnownZeroWriteOnlyWhereDataLanded) {
  std::vector<uint8_t> s;
  AppendWithZeros(&s, 0, 0, {0, 4096 | proto::kZeroPageFlag}, 0xaa);
  AppendMarker(&s, proto::kPacketSync, 1, 0);
  // Round 1: page 0 turned zero at the source.
  AppendWithZeros(&s, 2, 1, {0 | proto::kZeroPageFlag}, 0);
  AppendZeroRanges(&s, 3, 1, {2 * 4096, 2 * 4096});
  AppendMarker(&s, proto::kPacketSync, 4, 1);
  AppendMarker(&s, proto::kPacketFinish, 5, 2);
  Fixture f(s, false, /*zero_pages=*/true, /*reads_as_zero=*/true);
  ASSERT_OK(f.RunToEnd());
  EXPECT_THAT(f.rounds, ElementsAre(Pair(0u, 2u), Pair(1u, 3u)));
  for (uint64_t off = 0; off < 4 * 4096; off += 512) {
    EXPECT_EQ(f.byte_at(off), 0) << off;
  }
  ChannelStats st;
  f.rx.ExportStats(&st);
  EXPECT_EQ(st.zero_pages, 2u);
  EXPECT_EQ(st.untouched_pages, 2u);
  EXPECT_EQ(st.zero_range_packets, 1u);
  EXPECT_EQ(st.zero_pages_written, 1u);  // page 0 in round 1 only
}

TEST(ChannelReceiverTest, ZeroRangesAreAppliedWithinTheirRound) {
  std::vector<uint8_t> s;
  AppendZeroRanges(&s, 0, 0, {0, 4096, 2 * 4096, 2 * 4096});
  AppendMarker(&s, proto::kPacketSync, 1, 0);
  AppendMarker(&s, proto::kPacketFinish, 2, 1);
  Fixture f(s, false, true, false, /*prefill=*/0x55);
  ASSERT_OK(f.RunToEnd());
  EXPECT_THAT(f.rounds, ElementsAre(Pair(0u, 3u)));
  EXPECT_EQ(f.byte_at(0), 0);
  EXPECT_EQ(f.byte_at(4096), 0x55);
  EXPECT_EQ(f.byte_at(2 * 4096), 0);
  EXPECT_EQ(f.byte_at(4 * 4096 - 1), 0);
}

// A zero flag, a ZERO_RANGES packet or a bad range from a peer that did
// not negotiate them, or that lies, ends the channel with a clear error
// and writes nothing.
TEST(ChannelReceiverTest, BadZeroPagesAndRangesAreRefused) {
  struct Case {
    bool zero_pages;
    std::vector<uint8_t> stream;
    const char* want;
    // A range or offset past the region's end is out of range; anything
    // else malformed is an invalid argument.
    absl::StatusCode code = absl::StatusCode::kInvalidArgument;
  };
  std::vector<Case> cases;
  {
    Case c{false, {}, "not aligned"};
    AppendWithZeros(&c.stream, 0, 0, {4096 | proto::kZeroPageFlag}, 0);
    cases.push_back(c);
  }
  {
    Case c{false, {}, "did not negotiate zero pages"};
    AppendZeroRanges(&c.stream, 0, 0, {0, 4096});
    cases.push_back(c);
  }
  {
    Case c{true, {}, "outside region", absl::StatusCode::kOutOfRange};
    AppendZeroRanges(&c.stream, 0, 0, {3 * 4096, 2 * 4096});
    cases.push_back(c);
  }
  {
    Case c{true, {}, "ranges must ascend"};
    AppendZeroRanges(&c.stream, 0, 0, {2 * 4096, 4096, 0, 4096});
    cases.push_back(c);
  }
  {
    Case c{true, {}, "outside region", absl::StatusCode::kOutOfRange};
    AppendWithZeros(&c.stream, 0, 0, {4 * 4096 | proto::kZeroPageFlag}, 0);
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    Fixture f(c.stream, false, c.zero_pages, false, /*prefill=*/0x33);
    EXPECT_THAT(f.RunToEnd(), StatusIs(c.code, HasSubstr(c.want))) << c.want;
    for (uint64_t off = 0; off < 4 * 4096; off += 4096) {
      EXPECT_EQ(f.byte_at(off), 0x33) << c.want;
    }
  }
}

// kFeatureCompressedPages: a frame expands into the packet's pages, zero
// pages left out; SYNC counts every page.
TEST(ChannelReceiverTest, CompressedPayloadExpandsIntoItsPages) {
  std::vector<uint8_t> text;
  const std::vector<uint8_t> frame = TextFrame(2, &text);
  std::vector<uint8_t> s;
  AppendCompressed(&s, 0, 0, {4096 * 3, 4096 | proto::kZeroPageFlag, 0}, frame);
  AppendMarker(&s, proto::kPacketSync, 1, 0);
  AppendMarker(&s, proto::kPacketFinish, 2, 1);
  Fixture f(s, false, /*zero_pages=*/true, false, /*prefill=*/0x11,
            /*compressed=*/true);
  ASSERT_OK(f.RunToEnd());
  EXPECT_THAT(f.rounds, ElementsAre(Pair(0u, 3u)));
  const auto* base = static_cast<const uint8_t*>(f.region.region.base);
  EXPECT_EQ(std::memcmp(base + 4096 * 3, text.data(), 4096), 0);
  EXPECT_EQ(std::memcmp(base, text.data() + 4096, 4096), 0);
  EXPECT_EQ(f.byte_at(4096), 0);
  EXPECT_EQ(f.byte_at(2 * 4096), 0x11);
  ChannelStats st;
  f.rx.ExportStats(&st);
  EXPECT_EQ(st.compressed_packets, 1u);
  EXPECT_EQ(st.compressed_input_bytes, 2u * 4096);
  EXPECT_EQ(st.compressed_output_bytes, frame.size());
  EXPECT_EQ(st.payload_bytes, frame.size());
}

// Lengths that lie, frames that do not fit, and compression nobody
// negotiated: each ends the channel with a clear error, and no page
// outside those the packet names changes.
TEST(ChannelReceiverTest, BadCompressedPayloadsAreRefused) {
  std::vector<uint8_t> text;
  const std::vector<uint8_t> frame = TextFrame(2, &text);
  struct Case {
    bool compressed;
    std::vector<uint8_t> stream;
    const char* want;
  };
  std::vector<Case> cases;
  {
    Case c{false, {}, "reserved byte 4"};
    AppendCompressed(&c.stream, 0, 0, {0, 4096}, frame);
    cases.push_back(c);
  }
  {
    // Says the frame is as large as the pages: nothing saved, refused
    // before a byte of it is read.
    Case c{true, {}, "want fewer than the pages"};
    AppendCompressed(&c.stream, 0, 0, {0, 4096}, frame, 2 * 4096);
    cases.push_back(c);
  }
  {
    Case c{true, {}, "not a frame of the 4096 bytes"};
    AppendCompressed(&c.stream, 0, 0, {0}, frame);  // 2 pages into 1
    cases.push_back(c);
  }
  {
    // A shorter length than the frame: the frame is cut, and what
    // follows is not the next header.
    Case c{true, {}, "bad packet 0"};
    AppendCompressed(&c.stream, 0, 0, {0, 4096}, frame,
                     static_cast<uint32_t>(frame.size() - 8));
    cases.push_back(c);
  }
  {
    Case c{true, {}, "only a data packet may"};
    proto::PacketHeader h;
    h.flags = proto::kPacketSync;
    h.channel = kChannel;
    h.compressed_bytes = 100;
    c.stream = Header(h, {});
    cases.push_back(c);
  }
  for (Case& c : cases) {
    // A next header to read with the payload, so the frame is checked.
    AppendMarker(&c.stream, proto::kPacketFinish, 1, 0);
    Fixture f(c.stream, false, false, false, /*prefill=*/0x33, c.compressed);
    absl::StatusOr<ChannelReceiver::Step> step = f.RunToEnd();
    ASSERT_THAT(step, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("bad packet")))
        << c.want;
    EXPECT_THAT(std::string(step.status().message()), HasSubstr(c.want));
    EXPECT_EQ(f.byte_at(2 * 4096), 0x33) << c.want;
    EXPECT_EQ(f.byte_at(3 * 4096), 0x33) << c.want;
  }
}

// Sealed streams: a payload lands where it belongs and is opened there;
// until its tag checks out nothing of it counts, and one that never checks
// out leaves its pages marked unauthentic.
proto::SealKey TestSealKey() {
  proto::SealKey k;
  k.key.fill(0x5c);
  k.salt.fill(0x3a);
  return k;
}

// `packet` (header, offsets, payload) sealed as a source seals packet
// `num`.
std::vector<uint8_t> Sealed(std::vector<uint8_t> packet, uint64_t num,
                            proto::SealMode mode) {
  const size_t header =
      proto::PacketHeaderBytes(proto::Load32(packet.data() + 12));
  auto sealer =
      *proto::Sealer::Create(mode, TestSealKey(), proto::Sealer::Use::kSeal);
  sealer->Begin(num);
  sealer->Associate(absl::MakeConstSpan(packet.data(), header));
  sealer->SealBody(packet.data() + header, packet.data() + header,
                   packet.size() - header);
  const proto::SealTag tag = *sealer->FinishSeal();
  std::copy(tag.begin(), tag.end(), packet.begin() + proto::kPacketTagOffset);
  return packet;
}

std::vector<uint8_t> SealedData(uint64_t num, uint64_t round,
                                const std::vector<uint64_t>& offsets,
                                uint8_t fill, proto::SealMode mode) {
  std::vector<uint8_t> p;
  AppendData(&p, num, round, offsets, fill);
  return Sealed(std::move(p), num, mode);
}

std::vector<uint8_t> SealedMarker(uint16_t flags, uint64_t num, uint64_t round,
                                  proto::SealMode mode) {
  std::vector<uint8_t> p;
  AppendMarker(&p, flags, num, round);
  return Sealed(std::move(p), num, mode);
}

void Append(std::vector<uint8_t>* s, const std::vector<uint8_t>& more) {
  s->insert(s->end(), more.begin(), more.end());
}

// A receiver on a sealed stream over one 4-page region, marking into
// `unauthentic` (shared, as the channels of a session share it).
struct SealedFixture {
  SealedFixture(const std::vector<uint8_t>& bytes, proto::SealMode mode,
                UnauthenticPages* unauthentic)
      : stream(bytes),
        region(testing::MakeRegion(1, 4 * 4096)),
        table({&region.region, 1}),
        barrier(std::vector<uint32_t>{kChannel},
                [](uint64_t, uint64_t) { return absl::OkStatus(); }),
        failure([](const absl::Status&, Origin) {}),
        rx(kChannel, std::make_unique<testing::MemoryTransport>(stream), &table,
           {.max_pages = kMaxPages, .landings = {.unauthentic = unauthentic}},
           &barrier, &failure, nullptr,
           *proto::Sealer::Create(mode, TestSealKey(),
                                  proto::Sealer::Use::kOpen)) {}

  absl::StatusOr<ChannelReceiver::Step> RunToEnd() { return RunAll(rx); }
  uint8_t byte_at(uint64_t offset) const { return ByteAt(region, offset); }

  std::vector<uint8_t> stream;
  testing::TestRegion region;
  RegionTable table;
  RoundBarrier barrier;
  SessionFailure failure;
  ChannelReceiver rx;
};

class SealedReceiveTest : public ::testing::TestWithParam<proto::SealMode> {};

TEST_P(SealedReceiveTest, AnAuthenticPayloadLandsAndLeavesNothingMarked) {
  const proto::SealMode mode = GetParam();
  std::vector<uint8_t> s;
  Append(&s, SealedData(0, 0, {4096 * 3, 0}, 0xaa, mode));
  Append(&s, SealedMarker(proto::kPacketSync, 1, 0, mode));
  Append(&s, SealedMarker(proto::kPacketFinish, 2, 1, mode));
  testing::TestRegion shape = testing::MakeRegion(1, 4 * 4096);
  UnauthenticPages unauthentic({&shape.region, 1});
  SealedFixture f(s, mode, &unauthentic);

  absl::StatusOr<ChannelReceiver::Step> end = f.RunToEnd();
  ASSERT_OK(end);
  EXPECT_EQ(f.byte_at(4096 * 3 + 17), 0xaa);  // decrypted in place
  EXPECT_EQ(f.byte_at(0), 0xaa);
  EXPECT_EQ(unauthentic.count(), 0u);
}

TEST_P(SealedReceiveTest, AForgedPayloadLeavesItsPagesMarked) {
  const proto::SealMode mode = GetParam();
  std::vector<uint8_t> forged = SealedData(0, 0, {4096, 4096 * 2}, 0xaa, mode);
  forged[forged.size() - 5] ^= 0x40;
  Append(&forged, SealedMarker(proto::kPacketFinish, 1, 0, mode));
  testing::TestRegion shape = testing::MakeRegion(1, 4 * 4096);
  UnauthenticPages unauthentic({&shape.region, 1});
  SealedFixture f(forged, mode, &unauthentic);

  absl::StatusOr<ChannelReceiver::Step> end = f.RunToEnd();
  EXPECT_TRUE(absl::IsPermissionDenied(end.status())) << end.status();
  EXPECT_EQ(unauthentic.count(), 2u);
  EXPECT_TRUE(unauthentic.Test(0, 1));
  EXPECT_TRUE(unauthentic.Test(0, 2));
  EXPECT_FALSE(unauthentic.Test(0, 0));
  ChannelStats stats;
  f.rx.ExportStats(&stats);
  EXPECT_EQ(stats.pages, 0u);  // nothing of it counts
}

TEST_P(SealedReceiveTest, APayloadCutMidWayStaysMarkedUntilAnAuthenticCopy) {
  const proto::SealMode mode = GetParam();
  std::vector<uint8_t> cut = SealedData(0, 0, {0, 4096}, 0xaa, mode);
  cut.resize(cut.size() - 1000);
  testing::TestRegion shape = testing::MakeRegion(1, 4 * 4096);
  UnauthenticPages unauthentic({&shape.region, 1});
  {
    SealedFixture lost(cut, mode, &unauthentic);
    absl::StatusOr<ChannelReceiver::Step> end = lost.RunToEnd();
    EXPECT_TRUE(absl::IsUnavailable(end.status())) << end.status();
    EXPECT_EQ(unauthentic.count(), 2u);
    EXPECT_THAT(unauthentic.CheckEmpty("the session cannot end"),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("the stream was tampered with or a lost "
                                   "channel's packet was")));
  }
  // The re-send, on another channel: page 1 comes again, page 0 does not.
  std::vector<uint8_t> s;
  Append(&s, SealedData(0, 0, {4096}, 0xbb, mode));
  Append(&s, SealedMarker(proto::kPacketFinish, 1, 0, mode));
  SealedFixture other(s, mode, &unauthentic);
  absl::StatusOr<ChannelReceiver::Step> end = other.RunToEnd();
  ASSERT_OK(end);
  EXPECT_EQ(unauthentic.count(), 1u);
  EXPECT_TRUE(unauthentic.Test(0, 0));
  EXPECT_FALSE(unauthentic.Test(0, 1));
}

INSTANTIATE_TEST_SUITE_P(Modes, SealedReceiveTest,
                         ::testing::Values(proto::SealMode::kMac,
                                           proto::SealMode::kEncrypt),
                         [](const auto& info) {
                           return std::string(proto::SealModeName(info.param));
                         });

// Byte streams (engine/stream/stream_sink.h): STREAM and STREAM_END
// packets go to the sink once authentic, outside the rounds, beside
// pages on the same channel.
struct RecordingSink : StreamSink {
  absl::Status Take(const proto::StreamFrame& frame,
                    absl::Span<const uint8_t> payload) override {
    frames.push_back(frame);
    bytes[frame.stream].insert(bytes[frame.stream].end(), payload.begin(),
                               payload.end());
    return absl::OkStatus();
  }
  std::vector<proto::StreamFrame> frames;
  std::map<uint32_t, std::vector<uint8_t>> bytes;
};

std::vector<uint8_t> StreamPacket(const proto::StreamFrame& frame, uint64_t num,
                                  uint8_t first_byte,
                                  uint32_t next_header_bytes = 0) {
  proto::PacketHeader h = proto::StreamHeader(frame, kChannel, num);
  h.next_header_bytes = next_header_bytes;
  std::vector<uint8_t> p = Header(h, {});
  for (uint32_t i = 0; i < frame.bytes; ++i) {
    p.push_back(static_cast<uint8_t>(first_byte + i));
  }
  return p;
}

struct StreamFixture {
  StreamFixture(const std::vector<uint8_t>& bytes, StreamSink* sink,
                std::unique_ptr<proto::Sealer> opener = nullptr)
      : region(testing::MakeRegion(1, 4 * 4096)),
        table({&region.region, 1}),
        barrier(std::vector<uint32_t>{kChannel},
                [](uint64_t, uint64_t) { return absl::OkStatus(); }),
        failure([](const absl::Status&, Origin) {}),
        rx(kChannel, std::make_unique<testing::MemoryTransport>(bytes), &table,
           {.max_pages = kMaxPages, .next_header_size = true, .streams = sink},
           &barrier, &failure, nullptr, std::move(opener)) {}

  testing::TestRegion region;
  RegionTable table;
  RoundBarrier barrier;
  SessionFailure failure;
  ChannelReceiver rx;
};

TEST(ChannelReceiverStreams, StreamBytesReachTheSinkBesidePagesOutsideRounds) {
  std::vector<uint8_t> s;
  // Two streams, their offsets far from the channel's round 0, an
  // announced next header, a data page of round 0 between them.
  Append(&s, StreamPacket({.stream = 0, .offset = 0, .bytes = 5000}, 0, 1,
                          proto::kPacketFixedBytes));
  Append(&s, StreamPacket({.stream = 3, .offset = 0, .bytes = 10}, 1, 100));
  AppendData(&s, 2, 0, {4096}, 0x5a);
  Append(&s, StreamPacket({.stream = 0, .offset = 5000, .bytes = 7}, 3, 9));
  Append(&s, StreamPacket({.stream = 0, .offset = 5007, .end = true}, 4, 0));
  AppendMarker(&s, proto::kPacketSync, 5, 0);
  AppendMarker(&s, proto::kPacketFinish, 6, 1);
  RecordingSink sink;
  StreamFixture f(s, &sink);
  absl::StatusOr<ChannelReceiver::Step> end = RunAll(f.rx);
  ASSERT_OK(end);
  EXPECT_EQ(*end, ChannelReceiver::Step::kFinished);
  ASSERT_EQ(sink.frames.size(), 4u);
  EXPECT_EQ(sink.frames[3],
            (proto::StreamFrame{.stream = 0, .offset = 5007, .end = true}));
  ASSERT_EQ(sink.bytes[0].size(), 5007u);
  EXPECT_EQ(sink.bytes[0][4999], static_cast<uint8_t>(1 + 4999));
  EXPECT_EQ(sink.bytes[0][5000], 9);
  EXPECT_EQ(sink.bytes[3].size(), 10u);
  EXPECT_EQ(ByteAt(f.region, 4096), 0x5a);
}

TEST(ChannelReceiverStreams, AStreamPacketIsRefusedWhereTheSessionHasNone) {
  std::vector<uint8_t> s =
      StreamPacket({.stream = 0, .offset = 0, .bytes = 10}, 0, 1);
  StreamFixture f(s, nullptr);
  EXPECT_THAT(RunAll(f.rx),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("STREAM packet on a session that carries "
                                 "no streams")));
}

class SealedStreamTest : public ::testing::TestWithParam<proto::SealMode> {};

TEST_P(SealedStreamTest, OnlyAnAuthenticPayloadReachesTheSink) {
  const proto::SealMode mode = GetParam();
  std::vector<uint8_t> s;
  Append(&s,
         Sealed(StreamPacket({.stream = 2, .offset = 0, .bytes = 300}, 0, 7), 0,
                mode));
  Append(&s,
         Sealed(StreamPacket({.stream = 2, .offset = 300, .end = true}, 1, 0),
                1, mode));
  Append(&s, SealedMarker(proto::kPacketFinish, 2, 0, mode));
  RecordingSink sink;
  StreamFixture f(
      s, &sink,
      *proto::Sealer::Create(mode, TestSealKey(), proto::Sealer::Use::kOpen));
  ASSERT_OK(RunAll(f.rx));
  ASSERT_EQ(sink.bytes[2].size(), 300u);
  EXPECT_EQ(sink.bytes[2][299], static_cast<uint8_t>(7 + 299));
  EXPECT_TRUE(sink.frames.back().end);

  // One byte of the payload altered on the way: refused, nothing taken.
  std::vector<uint8_t> forged = Sealed(
      StreamPacket({.stream = 2, .offset = 0, .bytes = 300}, 0, 7), 0, mode);
  forged[proto::kPacketFixedBytes + 10] ^= 1;
  Append(&forged, SealedMarker(proto::kPacketFinish, 1, 0, mode));
  RecordingSink nothing;
  StreamFixture g(
      forged, &nothing,
      *proto::Sealer::Create(mode, TestSealKey(), proto::Sealer::Use::kOpen));
  EXPECT_THAT(RunAll(g.rx),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("packet 0 (stream 2 at offset 0) failed its "
                                 "authentication tag")));
  EXPECT_TRUE(nothing.frames.empty());
}

// The largest payload a stream packet may carry, sealed: read aside and
// opened whole, every byte as it was sent.
TEST_P(SealedStreamTest, TheLargestPayloadIsTakenWhole) {
  const proto::SealMode mode = GetParam();
  const uint32_t n = proto::kMaxStreamPayloadBytes;
  std::vector<uint8_t> s;
  Append(&s,
         Sealed(StreamPacket({.stream = 255, .offset = 0, .bytes = n}, 0, 3), 0,
                mode));
  Append(&s, SealedMarker(proto::kPacketFinish, 1, 0, mode));
  RecordingSink sink;
  StreamFixture f(
      s, &sink,
      *proto::Sealer::Create(mode, TestSealKey(), proto::Sealer::Use::kOpen));
  ASSERT_OK(RunAll(f.rx));
  ASSERT_EQ(sink.bytes[255].size(), n);
  for (uint32_t i = 0; i < n; i += 4093) {
    ASSERT_EQ(sink.bytes[255][i], static_cast<uint8_t>(3 + i)) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SealedStreamTest,
                         ::testing::Values(proto::SealMode::kMac,
                                           proto::SealMode::kEncrypt),
                         [](const auto& info) {
                           return std::string(proto::SealModeName(info.param));
                         });

}  // namespace
}  // namespace ramferry::engine
