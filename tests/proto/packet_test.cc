// Data-channel packet header: encode/decode round trips, the big-endian
// wire layout, and every malformed header DecodePacketFixed and
// DecodePageOffsets must reject.
#include "proto/packet.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/wire.h"
#include "tests/support/status_matchers.h"

namespace ramferry::proto {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr uint32_t kChannel = 7;
constexpr uint32_t kMaxPages = 128;

PacketHeader DataHeader(uint32_t pages) {
  PacketHeader h;
  h.flags = kPacketData;
  h.channel = kChannel;
  h.page_count = pages;
  h.packet_num = 0x0102030405060708ull;
  h.round = 0x1112131415161718ull;
  h.region_id = 0x21222324;
  h.page_size = 4096;
  return h;
}

std::vector<uint8_t> Encode(const PacketHeader& h,
                            const std::vector<uint64_t>& offsets) {
  std::vector<uint8_t> buf(PacketHeaderBytes(h.page_count), 0xEE);
  size_t n = EncodePacketHeader(h, offsets, absl::MakeSpan(buf));
  EXPECT_EQ(n, buf.size());
  return buf;
}

absl::Status DecodeFixed(const std::vector<uint8_t>& buf,
                         uint32_t channel = kChannel,
                         uint32_t max_pages = kMaxPages) {
  return DecodePacketFixed(buf, channel, max_pages, {}).status();
}

TEST(PacketTest, HeaderBytes) {
  EXPECT_EQ(PacketHeaderBytes(0), 64u);
  EXPECT_EQ(PacketHeaderBytes(1), 72u);
  EXPECT_EQ(PacketHeaderBytes(kMaxPacketPagesLimit), 64u + 8u * 4096u);
}

TEST(PacketTest, DataRoundTrip) {
  PacketHeader h = DataHeader(3);
  std::vector<uint64_t> offsets = {0, 4096 * 5, 4096 * 2};
  std::vector<uint8_t> buf = Encode(h, offsets);

  auto got = DecodePacketFixed(absl::MakeConstSpan(buf).first(64), kChannel,
                               kMaxPages, {});
  ASSERT_OK(got);
  EXPECT_EQ(got->flags, kPacketData);
  EXPECT_TRUE(got->is_data());
  EXPECT_EQ(got->channel, kChannel);
  EXPECT_EQ(got->page_count, 3u);
  EXPECT_EQ(got->packet_num, h.packet_num);
  EXPECT_EQ(got->round, h.round);
  EXPECT_EQ(got->region_id, h.region_id);
  EXPECT_EQ(got->page_size, 4096u);

  std::vector<uint64_t> out(3, 0xdead);
  absl::Status s = DecodePageOffsets(*got, absl::MakeConstSpan(buf).subspan(64),
                                     4096 * 8, false, absl::MakeSpan(out));
  ASSERT_OK(s);
  EXPECT_EQ(out, offsets);
}

TEST(PacketTest, SyncRoundTrip) {
  PacketHeader h;
  h.flags = kPacketSync;
  h.channel = kChannel;
  h.packet_num = 99;
  h.round = 12;
  std::vector<uint8_t> buf = Encode(h, {});
  ASSERT_EQ(buf.size(), 64u);
  auto got = DecodePacketFixed(buf, kChannel, kMaxPages, {});
  ASSERT_OK(got);
  EXPECT_EQ(got->flags, kPacketSync);
  EXPECT_FALSE(got->is_data());
  EXPECT_EQ(got->page_count, 0u);
  EXPECT_EQ(got->packet_num, 99u);
  EXPECT_EQ(got->round, 12u);
  EXPECT_EQ(got->region_id, 0u);
  EXPECT_EQ(got->page_size, 0u);
}

TEST(PacketTest, FinishRoundTrip) {
  PacketHeader h;
  h.flags = kPacketFinish;
  h.channel = kChannel;
  h.packet_num = 1000;
  h.round = 3;
  std::vector<uint8_t> buf = Encode(h, {});
  auto got = DecodePacketFixed(buf, kChannel, kMaxPages, {});
  ASSERT_OK(got);
  EXPECT_EQ(got->flags, kPacketFinish);
  EXPECT_FALSE(got->is_data());
  EXPECT_EQ(got->packet_num, 1000u);
  EXPECT_EQ(got->round, 3u);
}

TEST(PacketTest, BigEndianLayout) {
  PacketHeader h = DataHeader(2);
  h.flags = kPacketData;
  std::vector<uint8_t> buf = Encode(h, {0x0A0B0C0D0E0F1000ull, 0x2000});
  ASSERT_EQ(buf.size(), 80u);
  EXPECT_EQ(buf[0], 'R');
  EXPECT_EQ(buf[1], 'F');
  EXPECT_EQ(buf[2], 'P');
  EXPECT_EQ(buf[3], 'K');
  EXPECT_EQ(buf[4], 0x00);
  EXPECT_EQ(buf[5], kProtocolVersion);
  // flags
  EXPECT_EQ(buf[6], 0x00);
  EXPECT_EQ(buf[7], 0x00);
  // channel 7
  EXPECT_EQ((std::vector<uint8_t>(buf.begin() + 8, buf.begin() + 12)),
            (std::vector<uint8_t>{0, 0, 0, 7}));
  // page_count 2
  EXPECT_EQ((std::vector<uint8_t>(buf.begin() + 12, buf.begin() + 16)),
            (std::vector<uint8_t>{0, 0, 0, 2}));
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(buf[16 + i], 0x01 + i) << "packet_num byte " << i;
    EXPECT_EQ(buf[24 + i], 0x11 + i) << "round byte " << i;
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(buf[32 + i], 0x21 + i) << "region_id byte " << i;
  }
  // page_size 4096 = 0x00001000
  EXPECT_EQ((std::vector<uint8_t>(buf.begin() + 36, buf.begin() + 40)),
            (std::vector<uint8_t>{0, 0, 0x10, 0}));
  // Reserved bytes are zeroed even though the buffer started as 0xEE.
  for (int i = 40; i < 64; ++i) EXPECT_EQ(buf[i], 0) << "reserved byte " << i;
  EXPECT_EQ(
      (std::vector<uint8_t>(buf.begin() + 64, buf.begin() + 72)),
      (std::vector<uint8_t>{0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x00}));
  EXPECT_EQ(Load64(buf.data() + 72), 0x2000u);

  PacketHeader sync;
  sync.flags = kPacketSync;
  std::vector<uint8_t> s = Encode(sync, {});
  EXPECT_EQ(s[6], 0x00);
  EXPECT_EQ(s[7], 0x01);
  PacketHeader fin;
  fin.flags = kPacketFinish;
  std::vector<uint8_t> f = Encode(fin, {});
  EXPECT_EQ(f[7], 0x02);
}

TEST(PacketTest, RejectsTruncatedFixedHeader) {
  std::vector<uint8_t> buf = Encode(DataHeader(1), {0});
  for (size_t n : {size_t{0}, size_t{1}, size_t{40}, size_t{63}}) {
    absl::Status s = DecodePacketFixed(absl::MakeConstSpan(buf).first(n),
                                       kChannel, kMaxPages, {})
                         .status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(s.message(), AllOf(HasSubstr("truncated"),
                                   HasSubstr(std::to_string(n) + " of 64")))
        << n;
  }
  EXPECT_OK(DecodePacketFixed(absl::MakeConstSpan(buf).first(64), kChannel,
                              kMaxPages, {}));
}

TEST(PacketTest, RejectsBadMagic) {
  std::vector<uint8_t> buf = Encode(DataHeader(1), {0});
  buf[3] = 'X';
  absl::Status s = DecodeFixed(buf);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("magic"), HasSubstr("0x52465058")));
}

TEST(PacketTest, RejectsBadVersion) {
  for (uint16_t v :
       {uint16_t{0}, uint16_t(kProtocolVersion + 1), uint16_t{0x0100}}) {
    std::vector<uint8_t> buf = Encode(DataHeader(1), {0});
    Store16(buf.data() + 4, v);
    absl::Status s = DecodeFixed(buf);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << v;
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("version"), HasSubstr(std::to_string(v))));
  }
}

TEST(PacketTest, RejectsUnknownFlagBits) {
  for (uint16_t f : {uint16_t{1u << 5}, uint16_t{1u << 15},
                     uint16_t{kPacketSync | (1u << 4)}}) {
    PacketHeader h = DataHeader(1);
    std::vector<uint8_t> buf = Encode(h, {0});
    Store16(buf.data() + 6, f);
    absl::Status s = DecodeFixed(buf);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << f;
    EXPECT_THAT(s.message(), HasSubstr("flags")) << f;
  }
}

TEST(PacketTest, RejectsSyncAndFinishTogether) {
  PacketHeader h;
  h.flags = kPacketSync | kPacketFinish;
  h.channel = kChannel;
  std::vector<uint8_t> buf = Encode(h, {});
  absl::Status s = DecodeFixed(buf);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("flags"), HasSubstr("0x0003")));
}

TEST(PacketTest, RejectsChannelMismatch) {
  std::vector<uint8_t> buf = Encode(DataHeader(1), {0});
  absl::Status s = DecodeFixed(buf, /*channel=*/8);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("channel 7"), HasSubstr("arrived on channel 8")));
}

TEST(PacketTest, RejectsPageCountZeroOrOverMax) {
  {
    PacketHeader h = DataHeader(0);
    std::vector<uint8_t> buf = Encode(h, {});
    absl::Status s = DecodeFixed(buf);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("page_count 0"), HasSubstr("[1, 128]")));
  }
  {
    std::vector<uint8_t> buf = Encode(DataHeader(1), {0});
    Store32(buf.data() + 12, kMaxPages + 1);
    absl::Status s = DecodeFixed(buf);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("page_count 129"));
  }
  {
    std::vector<uint8_t> buf = Encode(DataHeader(1), {0});
    Store32(buf.data() + 12, 0xFFFFFFFFu);
    absl::Status s = DecodeFixed(buf);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("page_count 4294967295"));
  }
  // Exactly max is fine.
  std::vector<uint8_t> buf = Encode(DataHeader(1), {0});
  Store32(buf.data() + 12, kMaxPages);
  EXPECT_OK(DecodeFixed(buf));
}

TEST(PacketTest, RejectsEveryNonzeroReservedByte) {
  for (size_t i = 40; i < 64; ++i) {
    std::vector<uint8_t> buf = Encode(DataHeader(1), {0});
    buf[i] = 0x80;
    absl::Status s = DecodeFixed(buf);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << i;
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("reserved byte " + std::to_string(i)),
                      HasSubstr("0x80")));
  }
}

TEST(PacketTest, RejectsSyncOrFinishCarryingPagesRegionOrPageSize) {
  for (uint16_t flag : {uint16_t{kPacketSync}, uint16_t{kPacketFinish}}) {
    const char* name = flag == kPacketSync ? "SYNC" : "FINISH";
    struct Case {
      uint32_t pages, region, page_size;
      const char* field;
    };
    for (const Case& c :
         {Case{1, 0, 0, "page_count 1"}, Case{0, 5, 0, "region_id 5"},
          Case{0, 0, 4096, "page_size 4096"}}) {
      PacketHeader h;
      h.flags = flag;
      h.channel = kChannel;
      std::vector<uint8_t> buf = Encode(h, {});
      Store32(buf.data() + 12, c.pages);
      Store32(buf.data() + 32, c.region);
      Store32(buf.data() + 36, c.page_size);
      absl::Status s = DecodeFixed(buf);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
          << name << " " << c.field;
      EXPECT_THAT(s.message(), AllOf(HasSubstr(name), HasSubstr(c.field)));
    }
  }
}

// ---- DecodePageOffsets ----

absl::Status DecodeOffsets(uint32_t page_size, uint64_t region_length,
                           const std::vector<uint64_t>& offsets,
                           std::vector<uint64_t>* out = nullptr) {
  PacketHeader h = DataHeader(static_cast<uint32_t>(offsets.size()));
  h.page_size = page_size;
  std::vector<uint8_t> raw(8 * offsets.size());
  for (size_t i = 0; i < offsets.size(); ++i) {
    Store64(raw.data() + 8 * i, offsets[i]);
  }
  std::vector<uint64_t> local(offsets.size());
  std::vector<uint64_t>& dst = out ? *out : local;
  dst.resize(offsets.size());
  return DecodePageOffsets(h, raw, region_length, false, absl::MakeSpan(dst));
}

TEST(PageOffsetsTest, AcceptsFirstAndLastPage) {
  std::vector<uint64_t> out;
  absl::Status s = DecodeOffsets(4096, 4096 * 10, {0, 4096 * 9}, &out);
  ASSERT_OK(s);
  EXPECT_EQ(out, (std::vector<uint64_t>{0, 4096 * 9}));
  // A one-page region.
  EXPECT_OK(DecodeOffsets(512, 512, {0}));
}

TEST(PageOffsetsTest, RejectsMisalignedOffset) {
  absl::Status s = DecodeOffsets(4096, 4096 * 10, {0, 4096, 4097});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("offset 4097"), HasSubstr("index 2"),
                                 HasSubstr("aligned"), HasSubstr("4096")));
}

TEST(PageOffsetsTest, RejectsOffsetEqualToRegionLength) {
  absl::Status s = DecodeOffsets(4096, 4096 * 10, {4096 * 10});
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("offset 40960"), HasSubstr("index 0"),
                    HasSubstr("40960 bytes")));
}

TEST(PageOffsetsTest, RejectsPartialLastPage) {
  // region_length - page_size + 1: misaligned, and the page would overhang.
  const uint64_t len = 4096 * 10;
  absl::Status s = DecodeOffsets(4096, len, {len - 4096 + 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("offset " + std::to_string(len - 4095)));
  // The next aligned offset past the last page is out of range.
  s = DecodeOffsets(4096, len, {len});
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
}

TEST(PageOffsetsTest, RejectsHugeOffsetWithoutWrapping) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  // Aligned offsets whose offset + page_size would wrap to a small number.
  for (uint64_t off : {max - 4095, max - 4095 - 4096, uint64_t{1} << 63}) {
    absl::Status s = DecodeOffsets(4096, 4096 * 10, {off});
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << off;
    EXPECT_THAT(s.message(), HasSubstr("offset " + std::to_string(off)));
  }
  // Misaligned near the top: still rejected, never accepted.
  absl::Status s = DecodeOffsets(4096, 4096 * 10, {max});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // A region shorter than a page admits no offset at all.
  s = DecodeOffsets(4096, 1024, {0});
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
}

TEST(PageOffsetsTest, RejectsTruncatedRawOffsets) {
  PacketHeader h = DataHeader(3);
  std::vector<uint8_t> raw(8 * 3, 0);
  std::vector<uint64_t> out(3);
  for (size_t n : {size_t{0}, size_t{8}, size_t{23}}) {
    absl::Status s = DecodePageOffsets(h, absl::MakeConstSpan(raw).first(n),
                                       4096 * 10, false, absl::MakeSpan(out));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(s.message(), AllOf(HasSubstr("truncated"),
                                   HasSubstr(std::to_string(n) + " of 24")));
  }
  // An output span too short is refused too, never overrun.
  std::vector<uint64_t> small(2);
  absl::Status s =
      DecodePageOffsets(h, raw, 4096 * 10, false, absl::MakeSpan(small));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

TEST(PageOffsetsTest, StopsAtFirstBadOffset) {
  std::vector<uint64_t> out;
  absl::Status s =
      DecodeOffsets(4096, 4096 * 4, {0, 4096, 4096 * 4, 4096 * 2}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("index 2"));
}

// kFeatureNextHeaderSize: bytes 40..43 announce the next header's size.
TEST(PacketTest, NextHeaderSizeRoundTripsWhenNegotiated) {
  PacketHeader h = DataHeader(1);
  h.next_header_bytes = PacketHeaderBytes(kMaxPages);
  std::vector<uint8_t> buf = Encode(h, {0});
  EXPECT_EQ(Load32(buf.data() + 40), PacketHeaderBytes(kMaxPages));
  auto got = DecodePacketFixed(absl::MakeConstSpan(buf).first(64), kChannel,
                               kMaxPages, {.next_header_size = true});
  ASSERT_OK(got);
  EXPECT_EQ(got->next_header_bytes, PacketHeaderBytes(kMaxPages));

  PacketHeader sync;
  sync.flags = kPacketSync;
  sync.channel = kChannel;
  sync.next_header_bytes = 64;
  got = DecodePacketFixed(Encode(sync, {}), kChannel, kMaxPages,
                          {.next_header_size = true});
  ASSERT_OK(got);
  EXPECT_EQ(got->next_header_bytes, 64u);
}

TEST(PacketTest, NextHeaderSizeIsReservedWithoutTheCapability) {
  PacketHeader h = DataHeader(1);
  h.next_header_bytes = 72;
  absl::Status s = DecodeFixed(Encode(h, {0}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("reserved byte 43"));
}

TEST(PacketTest, RejectsAnnouncementsNoHeaderCouldHave) {
  const uint32_t max_bytes = PacketHeaderBytes(kMaxPages);
  for (uint32_t bad : {1u, 56u, 63u, 65u, 71u, max_bytes + 8, ~0u}) {
    PacketHeader h = DataHeader(1);
    h.next_header_bytes = bad;
    std::vector<uint8_t> buf = Encode(h, {0});
    absl::Status s =
        DecodePacketFixed(buf, kChannel, kMaxPages, {.next_header_size = true})
            .status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("announces a next header")) << bad;
  }
  PacketHeader fin;
  fin.flags = kPacketFinish;
  fin.channel = kChannel;
  fin.next_header_bytes = 64;
  absl::Status s = DecodePacketFixed(Encode(fin, {}), kChannel, kMaxPages,
                                     {.next_header_size = true})
                       .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("nothing may follow FINISH"));
  // The rest of the reserved bytes stay reserved.
  PacketHeader h = DataHeader(1);
  std::vector<uint8_t> buf = Encode(h, {0});
  buf[44] = 1;
  EXPECT_THAT(
      DecodePacketFixed(buf, kChannel, kMaxPages, {.next_header_size = true})
          .status()
          .message(),
      HasSubstr("reserved byte 44"));
}

// ---- kFeatureZeroPages ----

TEST(ZeroPagesTest, ZeroFlagOnlyWithTheCapability) {
  std::vector<uint64_t> out;
  const std::vector<uint64_t> flagged = {4096 | kZeroPageFlag, 0};
  PacketHeader h = DataHeader(2);
  std::vector<uint8_t> raw(16);
  Store64(raw.data(), flagged[0]);
  Store64(raw.data() + 8, flagged[1]);
  out.resize(2);
  EXPECT_EQ(
      DecodePageOffsets(h, raw, 4096 * 4, false, absl::MakeSpan(out)).code(),
      absl::StatusCode::kInvalidArgument);
  ASSERT_OK(DecodePageOffsets(h, raw, 4096 * 4, true, absl::MakeSpan(out)));
  EXPECT_TRUE(IsZeroPageEntry(out[0]));
  EXPECT_EQ(PageOffsetOf(out[0]), 4096u);
  EXPECT_FALSE(IsZeroPageEntry(out[1]));
  // The flag is bit 0 alone: other low bits are still misalignment, and
  // a flagged page must lie inside the region like any other.
  Store64(raw.data(), 4096 | 2);
  EXPECT_THAT(
      DecodePageOffsets(h, raw, 4096 * 4, true, absl::MakeSpan(out)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "page offset 4098 (index 0) is not aligned to page size 4096")));
  Store64(raw.data(), (4096 * 4) | kZeroPageFlag);
  EXPECT_EQ(
      DecodePageOffsets(h, raw, 4096 * 4, true, absl::MakeSpan(out)).code(),
      absl::StatusCode::kOutOfRange);
}

PacketHeader ZeroRangesHeader(uint32_t words) {
  PacketHeader h = DataHeader(words);
  h.flags = kPacketZeroRanges;
  return h;
}

absl::Status DecodeRanges(const std::vector<uint64_t>& words,
                          uint64_t region_length,
                          std::vector<ZeroRange>* out = nullptr) {
  const PacketHeader h = ZeroRangesHeader(static_cast<uint32_t>(words.size()));
  std::vector<uint8_t> buf = Encode(h, words);
  RAMFERRY_ASSIGN_OR_RETURN(
      PacketHeader got,
      DecodePacketFixed(absl::MakeConstSpan(buf).first(64), kChannel, kMaxPages,
                        {.zero_pages = true}));
  std::vector<ZeroRange> local(words.size() / 2);
  std::vector<ZeroRange>& dst = out ? *out : local;
  dst.resize(words.size() / 2);
  return DecodeZeroRanges(got, absl::MakeConstSpan(buf).subspan(64),
                          region_length, absl::MakeSpan(dst));
}

TEST(ZeroPagesTest, ZeroRangesRoundTrip) {
  std::vector<ZeroRange> out;
  ASSERT_OK(DecodeRanges({0, 4096, 4096 * 3, 4096 * 5}, 4096 * 8, &out));
  EXPECT_EQ(out, (std::vector<ZeroRange>{{0, 4096}, {4096 * 3, 4096 * 5}}));
  // Ranges may touch (the source merges them, but need not).
  EXPECT_OK(DecodeRanges({0, 4096, 4096, 4096}, 4096 * 8));
}

TEST(ZeroPagesTest, ZeroRangesPacketShapeIsChecked) {
  // Without the capability a ZERO_RANGES packet is refused outright.
  std::vector<uint8_t> buf = Encode(ZeroRangesHeader(2), {0, 4096});
  absl::Status s = DecodeFixed(buf);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("did not negotiate zero pages"));
  // An odd word count, none, or more than the packet bound.
  for (uint32_t words : {1u, 3u, 0u, kMaxPages + 2}) {
    PacketHeader h = ZeroRangesHeader(words);
    std::vector<uint8_t> b(PacketHeaderBytes(words));
    std::vector<uint64_t> zeros(words, 0);
    EncodePacketHeader(h, zeros, absl::MakeSpan(b));
    EXPECT_EQ(DecodePacketFixed(absl::MakeConstSpan(b).first(64), kChannel,
                                kMaxPages, {.zero_pages = true})
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << words;
  }
  // Two kinds at once is not a packet.
  buf = Encode(ZeroRangesHeader(2), {0, 4096});
  Store16(buf.data() + 6, kPacketZeroRanges | kPacketSync);
  EXPECT_THAT(
      DecodePacketFixed(absl::MakeConstSpan(buf).first(64), kChannel, kMaxPages,
                        {.zero_pages = true}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("packet flags 0x0005 are not a valid combination")));
}

TEST(ZeroPagesTest, BadZeroRangesAreRefused) {
  const uint64_t len = 4096 * 8;
  struct Case {
    std::vector<uint64_t> words;
    absl::StatusCode code;
    const char* why;
  };
  const Case cases[] = {
      {{0, 0}, absl::StatusCode::kInvalidArgument, "empty"},
      {{100, 4096}, absl::StatusCode::kInvalidArgument, "offset unaligned"},
      {{0, 100}, absl::StatusCode::kInvalidArgument, "length unaligned"},
      {{1, 4096}, absl::StatusCode::kInvalidArgument, "zero flag is no flag"},
      {{len, 4096}, absl::StatusCode::kOutOfRange, "starts at the end"},
      {{4096 * 7, 4096 * 2}, absl::StatusCode::kOutOfRange, "runs past it"},
      {{4096, ~uint64_t{0} - 4095},
       absl::StatusCode::kOutOfRange,
       "a length that would wrap"},
      {{~uint64_t{0} - 4095, 8192},
       absl::StatusCode::kOutOfRange,
       "an offset that would wrap"},
      {{4096 * 2, 4096 * 2, 4096 * 3, 4096},
       absl::StatusCode::kInvalidArgument,
       "overlaps the one before"},
      {{4096 * 4, 4096, 0, 4096},
       absl::StatusCode::kInvalidArgument,
       "descends"},
  };
  for (const Case& c : cases) {
    absl::Status s = DecodeRanges(c.words, len);
    EXPECT_EQ(s.code(), c.code) << c.why << ": " << s;
  }
  // A truncated pair array.
  const PacketHeader h = ZeroRangesHeader(2);
  std::vector<uint8_t> raw(15);
  std::vector<ZeroRange> out(1);
  EXPECT_EQ(DecodeZeroRanges(h, raw, len, absl::MakeSpan(out)).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ramferry::proto
