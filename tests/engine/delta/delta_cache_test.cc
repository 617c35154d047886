#include "engine/delta/delta_cache.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/page_delta.h"
#include "tests/support/status_matchers.h"

namespace ramferry::engine {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint32_t kPage = 4096;

std::unique_ptr<DeltaCache> Cache(uint32_t slots) {
  absl::StatusOr<std::unique_ptr<DeltaCache>> c =
      DeltaCache::Create(uint64_t{slots} * kPage, kPage);
  EXPECT_OK(c);
  return c.ok() ? std::move(*c) : nullptr;
}

// Pins `pages` of region 0, sends them (unpins, kept) as channel 0 in
// `round`; returns the pins.
std::vector<DeltaCache::Pinned> Send(DeltaCache& c, std::vector<uint64_t> pages,
                                     DeltaCache::PinCounts* counts = nullptr,
                                     uint64_t round = 1) {
  std::vector<DeltaCache::Pinned> pins(pages.size());
  DeltaCache::PinCounts n = c.Pin(0, pages, absl::MakeSpan(pins));
  if (counts != nullptr) *counts = n;
  c.Unpin(pins, /*keep=*/true, 0, round);
  return pins;
}

TEST(DeltaCacheTest, ASentPageHitsAndKeepsItsSlot) {
  auto c = Cache(4);
  DeltaCache::PinCounts n;
  const auto first = Send(*c, {7, 9}, &n);
  EXPECT_EQ(n.misses, 2u);
  EXPECT_EQ(n.hits, 0u);
  const auto again = Send(*c, {9, 7}, &n);
  EXPECT_EQ(n.hits, 2u);
  EXPECT_TRUE(again[0].hit);
  EXPECT_EQ(again[0].slot, first[1].slot);
  EXPECT_EQ(again[1].slot, first[0].slot);
  EXPECT_EQ(c->size(), 2u);
}

TEST(DeltaCacheTest, TheLeastRecentlySentIsEvictedFirst) {
  auto c = Cache(3);
  Send(*c, {1, 2, 3});
  Send(*c, {1});  // 2 is now the least recently sent
  DeltaCache::PinCounts n;
  Send(*c, {4}, &n);
  EXPECT_EQ(n.evictions, 1u);
  Send(*c, {1, 3, 4}, &n);
  EXPECT_EQ(n.hits, 3u);
  Send(*c, {2}, &n);
  EXPECT_EQ(n.misses, 1u);
}

TEST(DeltaCacheTest, APinnedSlotIsNeverEvicted) {
  auto c = Cache(2);
  std::vector<DeltaCache::Pinned> held(2);
  std::vector<uint64_t> pages = {1, 2};
  c->Pin(0, pages, absl::MakeSpan(held));
  // Every slot pinned: a new page gets none, and goes uncached.
  std::vector<DeltaCache::Pinned> more(1);
  std::vector<uint64_t> three = {3};
  const DeltaCache::PinCounts n = c->Pin(1, three, absl::MakeSpan(more));
  EXPECT_EQ(more[0].slot, DeltaCache::kNoSlot);
  EXPECT_EQ(n.evictions, 0u);
  c->Unpin(more, true, 0, 1);
  c->Unpin(held, true, 0, 1);
  EXPECT_EQ(c->size(), 2u);
}

TEST(DeltaCacheTest, ForgottenAndUndeliveredCopiesMiss) {
  auto c = Cache(4);
  Send(*c, {1, 2, 3});
  c->Forget(0, std::vector<uint64_t>{2, 99});
  // Not delivered: its copy is not what the destination holds.
  std::vector<DeltaCache::Pinned> pins(1);
  std::vector<uint64_t> three = {3};
  c->Pin(0, three, absl::MakeSpan(pins));
  c->Unpin(pins, /*keep=*/false, 0, 1);
  DeltaCache::PinCounts n;
  Send(*c, {1, 2, 3}, &n);
  EXPECT_EQ(n.hits, 1u);
  EXPECT_EQ(n.misses, 2u);
  EXPECT_EQ(n.evictions, 0u);  // the forgotten slots went back free
}

TEST(DeltaCacheTest, AForgetWhilePinnedFreesTheSlotAtUnpin) {
  auto c = Cache(2);
  std::vector<DeltaCache::Pinned> pins(1);
  std::vector<uint64_t> one = {1};
  c->Pin(0, one, absl::MakeSpan(pins));
  c->Forget(0, one);
  c->Unpin(pins, /*keep=*/true, 0, 1);
  EXPECT_EQ(c->size(), 0u);
  DeltaCache::PinCounts n;
  Send(*c, {1, 2}, &n);
  EXPECT_EQ(n.misses, 2u);
  EXPECT_EQ(n.evictions, 0u);
}

TEST(DeltaCacheTest, ALostChannelsCopiesOfTheOpenRoundAreForgotten) {
  auto c = Cache(8);
  Send(*c, {1, 2}, nullptr, /*round=*/1);
  std::vector<DeltaCache::Pinned> pins(2);
  std::vector<uint64_t> pages = {3, 4};
  c->Pin(0, pages, absl::MakeSpan(pins));
  c->Unpin(pins, true, /*channel=*/1, /*round=*/2);
  Send(*c, {5}, nullptr, /*round=*/2);  // channel 0's
  c->ForgetSentBy(1, 2);
  DeltaCache::PinCounts n;
  Send(*c, {1, 2, 3, 4, 5}, &n);
  EXPECT_EQ(n.hits, 3u);  // 1, 2 and 5
  EXPECT_EQ(n.misses, 2u);
}

TEST(DeltaCacheTest, ACacheWithoutRoomForAPageIsRefused) {
  EXPECT_THAT(DeltaCache::Create(kPage - 1, kPage).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Nor for pages over the delta bound, whatever its size.
  EXPECT_THAT(DeltaCache::Create(2 * proto::kMaxDeltaPayloadBytes,
                                 2 * proto::kMaxDeltaPayloadBytes)
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

Region RegionOf(uint32_t id, uint32_t page_size, uint64_t length) {
  Region r;
  r.id = id;
  r.page_size = page_size;
  r.length = length;
  return r;
}

// Review F7: the cache is for the page size of most memory among those it
// can hold; every other goes whole, each with why.
TEST(DeltaPlanTest, TheCacheIsForTheMostMemoryItCanHold) {
  const uint64_t kGiB = 1ull << 30;
  const std::vector<Region> regions = {
      RegionOf(1, 1u << 30, 4 * kGiB), RegionOf(2, 2u << 20, 2 * kGiB),
      RegionOf(3, kPage, kGiB), RegionOf(4, 2u << 20, kGiB)};
  DeltaPlan plan = PlanDeltaCache(regions, 256 << 20);
  EXPECT_EQ(plan.page_size, 2u << 20);  // regions 2 and 4: 3 GiB
  ASSERT_EQ(plan.whole.size(), 2u);
  EXPECT_THAT(plan.whole[0], HasSubstr("region 3 (4096-byte pages)"));
  EXPECT_THAT(plan.whole[1], HasSubstr("region 1 (1073741824-byte pages)"));
  EXPECT_THAT(plan.whole[1], HasSubstr("at most 8388608"));
  // A cache smaller than a 2 MiB page: 4 KiB pages it is.
  plan = PlanDeltaCache(regions, 1 << 20);
  EXPECT_EQ(plan.page_size, kPage);
  ASSERT_EQ(plan.whole.size(), 2u);
  EXPECT_THAT(plan.whole[0], HasSubstr("regions 2, 4 (2097152-byte pages)"));
  EXPECT_THAT(plan.whole[0], HasSubstr("at least 2097152"));
  // Nothing fits: no cache, and why.
  plan = PlanDeltaCache({regions.data(), 1}, 8 * kGiB);
  EXPECT_EQ(plan.page_size, 0u);
  ASSERT_EQ(plan.whole.size(), 1u);
}

}  // namespace
}  // namespace ramferry::engine
