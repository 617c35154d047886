#include "proto/page_delta.h"

#include <cstring>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/packet.h"
#include "tests/support/status_matchers.h"

namespace ramferry::proto {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint32_t kPage = 4096;

std::vector<uint8_t> RandomPage(std::mt19937_64& rng) {
  std::vector<uint8_t> p(kPage);
  for (auto& b : p) b = static_cast<uint8_t>(rng());
  return p;
}

// The delta of `before` -> `after` as a record, through RefreshCopy (which
// must bring the copy to `after`) and EncodeDelta.
std::vector<uint8_t> Delta(const std::vector<uint8_t>& before,
                           const std::vector<uint8_t>& after,
                           size_t room = MaxDeltaBytes(kPage)) {
  std::vector<uint8_t> copy = before, x(kPage), out(room);
  RefreshCopy(after.data(), copy.data(), x.data(), kPage);
  EXPECT_EQ(copy, after);
  out.resize(EncodeDelta(x, absl::MakeSpan(out)));
  return out;
}

TEST(PageDeltaTest, SmallChangesRoundTripInFewBytes) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<uint8_t> before = RandomPage(rng);
    std::vector<uint8_t> after = before;
    const int stores = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < stores; ++i) {
      const uint64_t v = rng();
      std::memcpy(after.data() + (rng() % (kPage / 8)) * 8, &v, 8);
    }
    const std::vector<uint8_t> record = Delta(before, after);
    ASSERT_FALSE(record.empty());
    // Two varints and at most 8 bytes per store.
    EXPECT_LE(record.size(), stores * (8u + 2 + 2));
    ASSERT_OK(CheckDelta(record, kPage));
    std::vector<uint8_t> page = before;
    ApplyDelta(record, page.data(), kPage);
    EXPECT_EQ(page, after);
  }
}

TEST(PageDeltaTest, EdgesOfThePageAndNeighbouringRunsRoundTrip) {
  std::mt19937_64 rng(2);
  const std::vector<uint8_t> before = RandomPage(rng);
  std::vector<uint8_t> after = before;
  after[0] ^= 1;
  after[2] ^= 1;  // within the merge gap of byte 0
  after[100] ^= 0xff;
  after[kPage - 1] ^= 0x80;
  const std::vector<uint8_t> record = Delta(before, after);
  ASSERT_OK(CheckDelta(record, kPage));
  std::vector<uint8_t> page = before;
  ApplyDelta(record, page.data(), kPage);
  EXPECT_EQ(page, after);
}

TEST(PageDeltaTest, AnUnchangedPageIsTheEmptyRun) {
  std::mt19937_64 rng(3);
  const std::vector<uint8_t> page = RandomPage(rng);
  const std::vector<uint8_t> record = Delta(page, page);
  EXPECT_EQ(record, (std::vector<uint8_t>{0, 0}));
  ASSERT_OK(CheckDelta(record, kPage));
}

TEST(PageDeltaTest, APageChangedEverywhereDoesNotFitAndStopsEarly) {
  std::mt19937_64 rng(4);
  const std::vector<uint8_t> before = RandomPage(rng);
  const std::vector<uint8_t> after = RandomPage(rng);
  EXPECT_TRUE(Delta(before, after).empty());
  // Half the page changed, as one run: still over the budget.
  std::vector<uint8_t> half = before;
  for (size_t i = 0; i < kPage / 2; ++i) half[i] ^= 0x5a;
  EXPECT_TRUE(Delta(before, half).empty());
}

TEST(PageDeltaTest, MalformedRecordsAreRefused) {
  struct Case {
    std::vector<uint8_t> record;
    const char* why;
  };
  const Case cases[] = {
      {{}, "empty"},
      {{0x80}, "truncated"},
      {{0, 0x85}, "truncated"},
      {{0x80, 0x00, 1, 7}, "bad or truncated"},  // a non-minimal varint
      {{0xff, 0xff, 0xff, 0xff, 0x7f, 1, 7}, "bad or truncated"},  // > 32 bit
      {{0, 3, 1, 2}, "truncated"},           // wants 3 bytes, has 2
      {{0x80, 0x20, 1, 7}, "runs past"},     // skip 4096, then a byte
      {{0xff, 0x1f, 2, 1, 2}, "runs past"},  // skip 4095, 2 bytes
      {{0, 0, 0, 0}, "empty run"},
      {{5, 0}, "empty run"},
      {{0, 1, 7, 0, 0}, "empty run"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(CheckDelta(c.record, kPage),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.why)))
        << ::testing::PrintToString(c.record);
  }
  // The last byte of the page, exactly: fine.
  ASSERT_OK(CheckDelta(std::vector<uint8_t>{0xff, 0x1f, 1, 9}, kPage));
}

TEST(PageDeltaTest, PacketEntriesCarryTheRecordSizeOnlyWhenNegotiated) {
  PacketHeader h;
  h.page_count = 3;
  h.page_size = kPage;
  h.region_id = 1;
  const uint64_t entries[] = {DeltaPageEntry(0, 17),
                              DeltaPageEntry(kPage, MaxDeltaBytes(kPage)),
                              2 * kPage | kZeroPageFlag};
  std::vector<uint8_t> raw(8 * 3);
  for (int i = 0; i < 3; ++i) {
    for (int b = 0; b < 8; ++b) {
      raw[8 * i + b] = static_cast<uint8_t>(entries[i] >> (56 - 8 * b));
    }
  }
  uint64_t out[3];
  ASSERT_OK(DecodePageOffsets(
      h, raw, 16 * kPage,
      PacketFeatures{.zero_pages = true, .delta_pages = true}, out));
  EXPECT_EQ(DeltaBytesOf(out[0], kPage), 17u);
  EXPECT_EQ(DeltaBytesOf(out[1], kPage), MaxDeltaBytes(kPage));
  EXPECT_EQ(DeltaBytesOf(out[2], kPage), 0u);
  EXPECT_FALSE(IsWholePageEntry(out[0], kPage));
  // Without the capability, the same bits are a misaligned offset.
  EXPECT_THAT(
      DecodePageOffsets(h, raw, 16 * kPage, PacketFeatures{.zero_pages = true},
                        out),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not aligned")));
  // A zero flag with a size is neither.
  raw[23] = 3;
  EXPECT_FALSE(DecodePageOffsets(
                   h, raw, 16 * kPage,
                   PacketFeatures{.zero_pages = true, .delta_pages = true}, out)
                   .ok());
}

}  // namespace
}  // namespace ramferry::proto
