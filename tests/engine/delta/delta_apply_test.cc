// The destination's half of a delta, against the source's (DeltaPacker):
// packets packed from real pages through a cache apply back to the same
// bytes, and a record that is bad, or for a page never received, changes
// nothing.
#include "engine/delta/delta_apply.h"

#include <cstring>
#include <random>
#include <vector>

#include "engine/delta/delta_cache.h"
#include "engine/delta/delta_packer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/packet.h"
#include "tests/support/status_matchers.h"

namespace ramferry::engine {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint32_t kPage = 4096;
constexpr uint64_t kPages = 64;

struct Memory {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(kPages * kPage);
  Region region() {
    Region r;
    r.id = 1;
    r.base = bytes.data();
    r.length = bytes.size();
    r.page_size = kPage;
    return r;
  }
};

// The destination's side of one packed packet: whole pages into place,
// then the records.
absl::Status Land(Memory& dst, HeldPages& held, absl::Span<const uint64_t> e,
                  const uint8_t* payload, uint64_t payload_bytes) {
  uint64_t at = 0;
  for (uint64_t entry : e) {
    if (!proto::IsWholePageEntry(entry, kPage)) continue;
    std::memcpy(dst.bytes.data() + entry, payload + at, kPage);
    at += kPage;
  }
  std::vector<iovec> runs;
  std::vector<uint64_t> offsets;
  absl::Status s = ApplyPacketDeltas(
      dst.region(), 0, e, absl::MakeConstSpan(payload + at, payload_bytes - at),
      held, 7, &runs, &offsets);
  if (!s.ok()) return s;
  for (uint64_t entry : e) {
    if (proto::IsWholePageEntry(entry, kPage)) held.Set(0, entry / kPage, 1);
  }
  return absl::OkStatus();
}

TEST(DeltaApplyTest, PackedRoundsApplyToTheSourcesBytes) {
  Memory src, dst;
  std::mt19937_64 rng(5);
  for (auto& b : src.bytes) b = static_cast<uint8_t>(rng());
  auto cache = DeltaCache::Create(32 * kPage, kPage);  // half the pages
  ASSERT_OK(cache);
  DeltaPacker packer(cache->get());
  Region src_region = src.region();
  HeldPages held(std::vector<Region>{dst.region()});
  std::vector<uint8_t> out(kPages * kPage);
  std::vector<iovec> sent;
  std::vector<uint64_t> sent_offsets;
  uint64_t deltas = 0;
  for (int round = 1; round <= 6; ++round) {
    if (round > 1) {  // 8-byte stores on a third of the pages
      for (int i = 0; i < 40; ++i) {
        const uint64_t v = rng();
        std::memcpy(src.bytes.data() + (rng() % (kPages * kPage / 8)) * 8, &v,
                    8);
      }
    }
    std::vector<uint64_t> entries;
    for (uint64_t p = 0; p < kPages; ++p) entries.push_back(p * kPage);
    const DeltaPacker::Packed packed =
        packer.Pack(src_region, 0, absl::MakeSpan(entries), out.data(), &sent,
                    &sent_offsets);
    ASSERT_EQ(sent.size(), kPages);
    ASSERT_OK(Land(dst, held, entries, out.data(), packed.payload_bytes));
    packer.Finish(true, 0, round);
    deltas += packed.delta_pages;
    ASSERT_EQ(dst.bytes, src.bytes) << "round " << round;
  }
  EXPECT_GT(deltas, 0u);
}

TEST(DeltaApplyTest, ADeltaForAPageNeverReceivedChangesNothing) {
  Memory dst;
  HeldPages held(std::vector<Region>{dst.region()});
  const uint8_t record[] = {0, 1, 0xff};
  const uint64_t entries[] = {proto::DeltaPageEntry(3 * kPage, 3)};
  std::vector<iovec> runs;
  std::vector<uint64_t> offsets;
  EXPECT_THAT(ApplyPacketDeltas(dst.region(), 0, entries, record, held, 9,
                                &runs, &offsets),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("never received")));
  EXPECT_EQ(dst.bytes, std::vector<uint8_t>(kPages * kPage));
}

TEST(DeltaApplyTest, OneBadRecordInAPacketChangesNoPage) {
  Memory dst;
  HeldPages held(std::vector<Region>{dst.region()});
  held.Set(0, 0, kPages);
  // A good record for page 1, then one that runs past page 2's end.
  const uint8_t records[] = {0, 1, 0xff, 0xff, 0x1f, 2, 1, 2};
  const uint64_t entries[] = {proto::DeltaPageEntry(1 * kPage, 3),
                              proto::DeltaPageEntry(2 * kPage, 5)};
  std::vector<iovec> runs;
  std::vector<uint64_t> offsets;
  EXPECT_THAT(
      ApplyPacketDeltas(dst.region(), 0, entries, records, held, 9, &runs,
                        &offsets),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("runs past")));
  EXPECT_EQ(dst.bytes, std::vector<uint8_t>(kPages * kPage));
  // Records that do not add up to the payload's are refused too.
  const uint64_t short_entries[] = {proto::DeltaPageEntry(1 * kPage, 3)};
  EXPECT_THAT(ApplyPacketDeltas(dst.region(), 0, short_entries, records, held,
                                9, &runs, &offsets),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("after its delta records")));
  EXPECT_EQ(dst.bytes, std::vector<uint8_t>(kPages * kPage));
}

}  // namespace
}  // namespace ramferry::engine
