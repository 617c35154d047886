// Dirty tracking reports every page written since the last collect, and
// never loses a write that races with a collect.
#include "tools/migrate/dirty_tracker.h"

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "ramferry/region.h"
#include "tests/support/status_matchers.h"

namespace ramferry::migrate {
namespace {

constexpr uint64_t kPages = 4096;  // 16 MiB

std::vector<uint64_t> Pages(const DirtyBitmap& b) {
  std::vector<uint64_t> v;
  for (uint64_t p = 0; p < b.pages(); ++p) {
    if (b.Test(p)) v.push_back(p);
  }
  return v;
}

TEST(UffdWpTracker, ReportsExactlyThePagesWrittenSinceTheLastCollect) {
  auto mem = MappedMemory::Allocate(kPages * 4096);
  ASSERT_OK(mem);
  uint8_t* p = (*mem)->data();
  std::memset(p, 1, kPages * 4096);
  auto tracker = MakeUffdWpTracker(p, kPages * 4096);
  ASSERT_OK(tracker);
  EXPECT_EQ((*tracker)->name(), "uffd-wp");

  p[5 * 4096] = 2;
  p[100 * 4096 + 7] = 3;
  p[(kPages - 1) * 4096 + 4095] = 4;
  DirtyBitmap first(kPages);
  absl::StatusOr<uint64_t> n = (*tracker)->Collect(first);
  ASSERT_OK(n);
  EXPECT_EQ(*n, 3u);
  EXPECT_EQ(Pages(first), (std::vector<uint64_t>{5, 100, kPages - 1}));

  p[6 * 4096] = 9;  // only this one since
  DirtyBitmap second(kPages);
  ASSERT_OK((*tracker)->Collect(second));
  EXPECT_EQ(Pages(second), (std::vector<uint64_t>{6}));

  DirtyBitmap third(kPages);
  ASSERT_EQ(*(*tracker)->Collect(third), 0u);
}

TEST(UffdWpTracker, RefusesUnalignedMemoryWithAReason) {
  auto mem = MappedMemory::Allocate(8192);
  ASSERT_OK(mem);
  auto t = MakeUffdWpTracker((*mem)->data() + 1, 4096);
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
}

// The no-lost-write property, checked write by write. Collects are
// numbered 1, 2, ...; `started` is the number of the latest collect to
// begin. A writer reads it before a write (a) and after (b): collects up
// to a may already be past the page, and collect b+1 begins after the write
// finished, so the page must be reported by one of collects a..b+1.
class NoLostWriteTest : public ::testing::TestWithParam<bool /*uffd*/> {};

TEST_P(NoLostWriteTest, WritesRacingWithCollectsAreAllReported) {
  auto mem = MappedMemory::Allocate(kPages * 4096);
  ASSERT_OK(mem);
  uint8_t* base = (*mem)->data();
  std::memset(base, 0, kPages * 4096);
  std::unique_ptr<DirtyTracker> tracker;
  if (GetParam()) {
    auto t = MakeUffdWpTracker(base, kPages * 4096);
    ASSERT_OK(t);
    tracker = std::move(*t);
  } else {
    tracker = MakeBitmapTracker(kPages);
  }
  struct Write {
    uint64_t page;
    uint32_t a, b;
  };
  constexpr int kWriters = 2;
  constexpr int kWritesEach = 40000;
  std::atomic<uint32_t> started{0};
  std::atomic<int> running{kWriters};
  std::vector<std::vector<Write>> log(kWriters);
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::mt19937_64 rng(w + 1);
      log[w].reserve(kWritesEach);
      for (int i = 0; i < kWritesEach; ++i) {
        const uint64_t page = rng() % kPages;
        const uint32_t a = started.load();
        // Through an atomic_ref: two writers may hit the same word.
        std::atomic_ref<uint64_t>(
            *reinterpret_cast<uint64_t*>(base + page * 4096))
            .fetch_add(1, std::memory_order_relaxed);
        tracker->MarkWritten(page);
        log[w].push_back({page, a, started.load()});
        if (i % 32 == 0) std::this_thread::yield();  // let collects in
      }
      running.fetch_sub(1);
    });
  }
  // reported[k] holds what collect k reported (k = 1, 2, ...).
  std::vector<std::unique_ptr<DirtyBitmap>> reported(1);
  auto collect = [&] {
    started.store(static_cast<uint32_t>(reported.size()));
    reported.push_back(std::make_unique<DirtyBitmap>(kPages));
    ASSERT_OK(tracker->Collect(*reported.back()));
  };
  while (running.load() > 0) collect();
  for (auto& t : writers) t.join();
  collect();  // the first collect after every write finished
  collect();

  uint64_t lost = 0;
  for (const auto& writes : log) {
    for (const Write& w : writes) {
      bool seen = false;
      for (uint32_t k = std::max<uint32_t>(w.a, 1);
           k <= w.b + 1 && k < reported.size() && !seen; ++k) {
        seen = reported[k]->Test(w.page);
      }
      lost += !seen;
    }
  }
  EXPECT_GE(reported.size(), 20u) << "too few collects raced the writes";
  EXPECT_EQ(lost, 0u) << "of " << kWriters * kWritesEach << " writes";
}

INSTANTIATE_TEST_SUITE_P(Trackers, NoLostWriteTest,
                         ::testing::Values(true, false), [](const auto& info) {
                           return info.param ? "uffd" : "bitmap";
                         });

}  // namespace
}  // namespace ramferry::migrate
