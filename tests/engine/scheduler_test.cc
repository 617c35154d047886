// Scheduler: dirty bitmaps in, WRITE batches on the least-loaded rings out.
// The rings have no consumer thread; the test drains them itself.
#include "engine/scheduler.h"

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/region.h"
#include "tests/support/status_matchers.h"

namespace ramferry::engine {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Regions only need ids and geometry here; the scheduler never touches
// their memory.
Region MakeRegion(uint32_t id, uint64_t pages, uint32_t page_size) {
  Region r;
  r.id = id;
  r.name = "r" + std::to_string(id);
  r.length = pages * page_size;
  r.page_size = page_size;
  return r;
}

struct Rings {
  Rings(int n, uint32_t entries, uint32_t max_pages) {
    for (int i = 0; i < n; ++i) {
      owned.push_back(std::make_unique<CommandRing>(entries, max_pages));
      ptrs.push_back(owned.back().get());
    }
  }
  std::vector<std::unique_ptr<CommandRing>> owned;
  std::vector<CommandRing*> ptrs;
};

struct Drained {
  uint32_t ring;
  CommandType type;
  uint32_t region;
  uint64_t round;
  std::vector<uint64_t> offsets;
};

std::vector<Drained> DrainRing(CommandRing& ring, uint32_t index) {
  std::vector<Drained> out;
  uint32_t n = ring.Peek(1u << 20);
  for (uint32_t i = 0; i < n; ++i) {
    const Command& c = ring.At(i);
    EXPECT_TRUE(c.type == CommandType::kWrite ||
                c.type == CommandType::kZeroRanges);
    EXPECT_EQ(c.barrier_seq, 0u);
    out.push_back({index, c.type, c.region, c.round,
                   std::vector<uint64_t>(c.offsets, c.offsets + c.page_count)});
  }
  ring.Release(n);
  return out;
}

std::vector<Drained> DrainAll(Rings& rings) {
  std::vector<Drained> all;
  for (uint32_t i = 0; i < rings.ptrs.size(); ++i) {
    for (Drained& d : DrainRing(*rings.ptrs[i], i)) all.push_back(d);
  }
  return all;
}

TEST(SchedulerTest, EveryDirtyPageExactlyOnce) {
  constexpr uint32_t kPacketPages = 8;
  constexpr uint64_t kPages = 1000;  // not a multiple of 64
  Rings rings(3, 256, kPacketPages);
  std::vector<Region> regions = {MakeRegion(17, kPages, 4096)};
  Scheduler sched(rings.ptrs, regions, kPacketPages);

  DirtyBitmap dirty(kPages);
  std::set<uint64_t> want;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 300; ++i) {
    uint64_t p = rng() % kPages;
    dirty.Set(p);
    want.insert(p);
  }
  for (uint64_t p : {uint64_t{0}, uint64_t{63}, uint64_t{64}, kPages - 1}) {
    dirty.Set(p);
    want.insert(p);
  }
  std::vector<DirtyBitmap*> bitmaps = {&dirty};
  auto got = sched.ScheduleRound(bitmaps, /*round=*/5);
  ASSERT_OK(got);
  EXPECT_EQ(got->pages, want.size());
  EXPECT_EQ(got->bytes, want.size() * 4096);
  EXPECT_EQ(dirty.Count(), 0u) << "the round takes every bit";

  uint64_t backlog = 0;
  for (CommandRing* r : rings.ptrs) backlog += r->backlog_pages();
  EXPECT_EQ(backlog, want.size());

  std::vector<Drained> cmds = DrainAll(rings);
  std::multiset<uint64_t> seen;
  for (const Drained& c : cmds) {
    EXPECT_EQ(c.region, 0u);
    EXPECT_EQ(c.round, 5u);
    EXPECT_GE(c.offsets.size(), 1u);
    EXPECT_LE(c.offsets.size(), kPacketPages);
    for (uint64_t off : c.offsets) {
      EXPECT_EQ(off % 4096, 0u) << off;
      seen.insert(off / 4096);
    }
  }
  EXPECT_EQ(std::set<uint64_t>(seen.begin(), seen.end()), want);
  EXPECT_EQ(seen.size(), want.size()) << "a page was queued twice";
  // Batches are packet-sized: only one partial batch.
  EXPECT_EQ(cmds.size(), (want.size() + kPacketPages - 1) / kPacketPages);

  // An empty round queues nothing.
  auto none = sched.ScheduleRound(bitmaps, 6);
  ASSERT_OK(none);
  EXPECT_EQ(none->pages, 0u);
  EXPECT_EQ(none->bytes, 0u);
  EXPECT_TRUE(DrainAll(rings).empty());
}

TEST(SchedulerTest, TwoRegionsWithDifferentPageSizes) {
  constexpr uint32_t kPacketPages = 16;
  Rings rings(3, 256, kPacketPages);
  std::vector<Region> regions = {MakeRegion(100, 200, 4096),
                                 MakeRegion(200, 70, 65536)};
  Scheduler sched(rings.ptrs, regions, kPacketPages);
  DirtyBitmap a(200), b(70);
  a.SetRange(10, 40);   // 40 pages
  a.Set(199);           // 41
  b.SetRange(60, 100);  // 10 pages, clipped at 70
  b.Set(0);             // 11
  std::vector<DirtyBitmap*> bitmaps = {&a, &b};
  auto got = sched.ScheduleRound(bitmaps, 9);
  ASSERT_OK(got);
  EXPECT_EQ(got->pages, 41u + 11u);
  EXPECT_EQ(got->bytes, 41u * 4096 + 11u * 65536);
  EXPECT_EQ(a.Count(), 0u);
  EXPECT_EQ(b.Count(), 0u);

  std::map<uint32_t, std::multiset<uint64_t>> pages;  // region -> pages
  std::map<uint32_t, int> batches;
  for (const Drained& c : DrainAll(rings)) {
    ASSERT_LT(c.region, 2u);
    const uint64_t ps = regions[c.region].page_size;
    EXPECT_EQ(c.round, 9u);
    EXPECT_LE(c.offsets.size(), kPacketPages);
    ++batches[c.region];
    for (uint64_t off : c.offsets) {
      EXPECT_EQ(off % ps, 0u) << "region " << c.region << " offset " << off;
      pages[c.region].insert(off / ps);
    }
  }
  std::multiset<uint64_t> want_a, want_b;
  for (uint64_t p = 10; p < 50; ++p) want_a.insert(p);
  want_a.insert(199);
  for (uint64_t p = 60; p < 70; ++p) want_b.insert(p);
  want_b.insert(0);
  EXPECT_EQ(pages[0], want_a);
  EXPECT_EQ(pages[1], want_b);
  // One region per batch: 41 pages -> 3 batches, 11 -> 1.
  EXPECT_EQ(batches[0], 3);
  EXPECT_EQ(batches[1], 1);
}

TEST(SchedulerTest, MismatchedBitmapsRejectedUntouched) {
  Rings rings(2, 64, 8);
  std::vector<Region> regions = {MakeRegion(1, 100, 4096),
                                 MakeRegion(2, 50, 4096)};
  Scheduler sched(rings.ptrs, regions, 8);
  DirtyBitmap good(100), wrong(51), right(50);
  good.SetRange(0, 30);
  wrong.SetRange(0, 51);
  right.SetAll();

  {
    // Too few bitmaps.
    std::vector<DirtyBitmap*> bitmaps = {&good};
    absl::Status s = sched.ScheduleRound(bitmaps, 0).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("1 dirty bitmaps"), HasSubstr("2 regions")));
  }
  {
    // The second bitmap is one page too big: the first is not taken either.
    std::vector<DirtyBitmap*> bitmaps = {&good, &wrong};
    absl::Status s = sched.ScheduleRound(bitmaps, 0).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("dirty bitmap 1"), HasSubstr("51 pages"),
                      HasSubstr("region 2"), HasSubstr("has 50")));
  }
  {
    std::vector<DirtyBitmap*> bitmaps = {&good, nullptr};
    absl::Status s = sched.ScheduleRound(bitmaps, 0).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("dirty bitmap 1"));
  }
  EXPECT_EQ(good.Count(), 30u);
  EXPECT_EQ(wrong.Count(), 51u);
  for (CommandRing* r : rings.ptrs) {
    EXPECT_EQ(r->Peek(100), 0u);
    EXPECT_EQ(r->backlog_pages(), 0u);
  }
  // The right bitmaps go through.
  std::vector<DirtyBitmap*> bitmaps = {&good, &right};
  auto got = sched.ScheduleRound(bitmaps, 0);
  ASSERT_OK(got);
  EXPECT_EQ(got->pages, 80u);
}

TEST(SchedulerTest, NewBatchesGoToLeastLoadedRings) {
  constexpr uint32_t kPacketPages = 8;
  Rings rings(3, 64, kPacketPages);
  // Ring 0 already holds 8 full batches (64 pages) from an earlier round.
  for (int i = 0; i < 8; ++i) {
    Command* c = rings.ptrs[0]->BeginPush();
    ASSERT_NE(c, nullptr);
    c->type = CommandType::kWrite;
    c->region = 0;
    c->page_count = kPacketPages;
    c->round = 0;
    rings.ptrs[0]->CommitPush();
  }
  ASSERT_EQ(rings.ptrs[0]->backlog_pages(), 64u);

  std::vector<Region> regions = {MakeRegion(1, 1024, 4096)};
  Scheduler sched(rings.ptrs, regions, kPacketPages);
  DirtyBitmap dirty(1024);
  dirty.SetRange(0, 96);  // 12 batches: fits rings 1 and 2 below 64 each
  std::vector<DirtyBitmap*> bitmaps = {&dirty};
  auto got = sched.ScheduleRound(bitmaps, 1);
  ASSERT_OK(got);
  EXPECT_EQ(rings.ptrs[0]->Peek(100), 8u) << "the loaded ring got new work";
  EXPECT_EQ(rings.ptrs[0]->backlog_pages(), 64u);
  EXPECT_EQ(rings.ptrs[1]->backlog_pages(), 48u);
  EXPECT_EQ(rings.ptrs[2]->backlog_pages(), 48u);

  // Once ring 0 drains, it is the least loaded and takes the next batches.
  DrainRing(*rings.ptrs[0], 0);
  dirty.SetRange(200, 16);
  got = sched.ScheduleRound(bitmaps, 2);
  ASSERT_OK(got);
  EXPECT_EQ(rings.ptrs[0]->backlog_pages(), 16u);
  EXPECT_EQ(rings.ptrs[1]->backlog_pages(), 48u);
  EXPECT_EQ(rings.ptrs[2]->backlog_pages(), 48u);
}

TEST(SchedulerTest, EvenSpreadWhenIdle) {
  constexpr uint32_t kPacketPages = 4;
  Rings rings(3, 64, kPacketPages);
  std::vector<Region> regions = {MakeRegion(1, 64, 4096)};
  Scheduler sched(rings.ptrs, regions, kPacketPages);
  DirtyBitmap dirty(64);
  dirty.SetRange(0, 36);  // 9 batches
  std::vector<DirtyBitmap*> bitmaps = {&dirty};
  ASSERT_OK(sched.ScheduleRound(bitmaps, 0));
  for (CommandRing* r : rings.ptrs) {
    EXPECT_EQ(r->Peek(100), 3u);
    EXPECT_EQ(r->backlog_pages(), 12u);
  }
}

TEST(SchedulerTest, AbortedRingFailsRound) {
  Rings rings(2, 16, 4);
  std::vector<Region> regions = {MakeRegion(1, 64, 4096)};
  Scheduler sched(rings.ptrs, regions, 4);
  for (CommandRing* r : rings.ptrs) r->Abort();
  DirtyBitmap dirty(64);
  dirty.SetRange(0, 10);
  std::vector<DirtyBitmap*> bitmaps = {&dirty};
  absl::Status s = sched.ScheduleRound(bitmaps, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
}

// Zero ranges: the pages inside them whose bits are set go as
// ZERO_RANGES commands of (offset, length) pairs, merged where they
// touch, at most packet_pages / 2 pairs each; every other dirty page goes
// as WRITE; bits outside the dirty set stay as they are.
TEST(SchedulerTest, ZeroRangesTakeOnlyTheirDirtyPages) {
  constexpr uint32_t kPacketPages = 5;  // odd: 2 pairs per command
  constexpr uint64_t kPages = 300;
  Rings rings(2, 256, kPacketPages);
  std::vector<Region> regions = {MakeRegion(3, kPages, 4096)};
  Scheduler sched(rings.ptrs, regions, kPacketPages);
  DirtyBitmap dirty(kPages);
  dirty.SetAll();
  // Holes in the dirty set: page 10 and pages 128..129 stay clean.
  dirty.TakeBits(0, uint64_t{1} << 10);
  dirty.TakeBits(2, 3);
  const std::vector<std::vector<proto::ZeroRange>> ranges = {{
      {0, 4096 * 20},            // pages 0..19, less 10
      {4096 * 20, 4096 * 4},     // touches the one before: merged
      {4096 * 100, 4096 * 100},  // 100..199, less 128..129; crosses words
      {4096 * 299, 4096},        // the last page
  }};
  std::vector<DirtyBitmap*> bitmaps = {&dirty};
  auto got = sched.ScheduleRound(bitmaps, 2, ranges);
  ASSERT_OK(got);
  const uint64_t zeroed = 23 + 98 + 1;
  EXPECT_EQ(got->zero_range_pages, zeroed);
  EXPECT_EQ(got->pages, kPages - 3);
  EXPECT_EQ(dirty.Count(), 0u);

  std::set<uint64_t> written, zero;
  for (const Drained& c : DrainAll(rings)) {
    EXPECT_EQ(c.round, 2u);
    if (c.type == CommandType::kWrite) {
      for (uint64_t off : c.offsets) written.insert(off / 4096);
      continue;
    }
    ASSERT_EQ(c.offsets.size() % 2, 0u);
    EXPECT_LE(c.offsets.size(), 4u);
    for (size_t i = 0; i < c.offsets.size(); i += 2) {
      for (uint64_t p = c.offsets[i] / 4096;
           p < (c.offsets[i] + c.offsets[i + 1]) / 4096; ++p) {
        EXPECT_TRUE(zero.insert(p).second) << "page " << p << " twice";
      }
      if (i >= 2) {
        // Merged: a pair never starts where the one before ends.
        EXPECT_GT(c.offsets[i], c.offsets[i - 2] + c.offsets[i - 1]);
      }
    }
  }
  EXPECT_EQ(zero.size(), zeroed);
  for (uint64_t p :
       {0ull, 9ull, 11ull, 23ull, 100ull, 127ull, 130ull, 199ull, 299ull}) {
    EXPECT_TRUE(zero.count(p)) << p;
  }
  for (uint64_t p : {10ull, 128ull, 129ull}) {
    EXPECT_FALSE(zero.count(p) || written.count(p)) << p;
  }
  for (uint64_t p : zero) EXPECT_FALSE(written.count(p)) << p;
  EXPECT_EQ(written.size() + zero.size(), kPages - 3);
}

TEST(SchedulerTest, BadZeroRangesAreRejectedWithNothingTaken) {
  Rings rings(1, 64, 8);
  std::vector<Region> regions = {MakeRegion(3, 64, 4096)};
  Scheduler sched(rings.ptrs, regions, 8);
  DirtyBitmap dirty(64);
  dirty.SetAll();
  std::vector<DirtyBitmap*> bitmaps = {&dirty};
  const std::vector<std::vector<proto::ZeroRange>> bad[] = {
      {{{100, 4096}}},                  // unaligned
      {{{4096 * 63, 4096 * 2}}},        // past the end
      {{{4096 * 4, 4096}, {0, 4096}}},  // descending
      {{{0, 0}}},                       // empty
      {{}, {}},                         // two lists, one region
  };
  for (const auto& ranges : bad) {
    auto got = sched.ScheduleRound(bitmaps, 0, ranges);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(dirty.Count(), 64u);
  }
  EXPECT_TRUE(DrainAll(rings).empty());
}

}  // namespace
}  // namespace ramferry::engine
