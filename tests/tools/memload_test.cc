#include "tools/migrate/memload.h"

#include <xxhash.h>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ramferry/region.h"
#include "tests/support/status_matchers.h"

namespace ramferry::migrate {
namespace {

TEST(Memload, WritesOnlyItsDirtySetAndStopsWritingWhenPaused) {
  constexpr uint64_t kPages = 2048;
  auto mem = MappedMemory::Allocate(kPages * 4096);
  ASSERT_OK(mem);
  std::memset((*mem)->data(), 0, kPages * 4096);
  auto tracker = MakeBitmapTracker(kPages);
  Memload::Options o;
  o.dirty_set_pages = 256;
  o.pages_per_second = 200000;
  o.writers = 2;
  Memload load((*mem)->data(), kPages, o, tracker.get());
  load.Start();
  while (load.written() < 2000) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_OK(load.Pause());
  EXPECT_FALSE(load.running());
  const uint64_t written = load.written();
  const uint64_t digest = XXH3_64bits((*mem)->data(), kPages * 4096);
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(load.written(), written);
  EXPECT_EQ(XXH3_64bits((*mem)->data(), kPages * 4096), digest);

  DirtyBitmap dirty(kPages);
  ASSERT_OK(tracker->Collect(dirty));
  EXPECT_GT(dirty.Count(), 0u);
  for (uint64_t p = 256; p < kPages; ++p) ASSERT_FALSE(dirty.Test(p)) << p;

  load.Resume();
  EXPECT_TRUE(load.running());
  while (load.written() == written) absl::SleepFor(absl::Milliseconds(1));
  load.Stop();
  EXPECT_FALSE(load.running());
}

TEST(Memload, StoppingPausedWritersWritesNothingMore) {
  constexpr uint64_t kPages = 512;
  auto mem = MappedMemory::Allocate(kPages * 4096);
  ASSERT_OK(mem);
  Memload::Options o{
      .dirty_set_pages = kPages, .pages_per_second = 500000, .writers = 2};
  Memload load((*mem)->data(), kPages, o, nullptr);
  load.Start();
  while (load.written() < 1000) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_OK(load.Pause());
  const uint64_t written = load.written();
  const uint64_t digest = XXH3_64bits((*mem)->data(), kPages * 4096);
  load.Stop();  // releases the parked writers, which must just exit
  EXPECT_EQ(load.written(), written);
  EXPECT_EQ(XXH3_64bits((*mem)->data(), kPages * 4096), digest);
}

TEST(Memload, ZeroRateMeansNoWriters) {
  auto mem = MappedMemory::Allocate(4096 * 16);
  ASSERT_OK(mem);
  Memload load((*mem)->data(), 16, {.dirty_set_pages = 16}, nullptr);
  load.Start();
  EXPECT_FALSE(load.running());
  ASSERT_OK(load.Pause());  // returns at once: nothing to park
  EXPECT_EQ(load.written(), 0u);
}

}  // namespace
}  // namespace ramferry::migrate
