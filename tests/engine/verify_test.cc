// Page digests: the table the channel threads fill as pages move, and the
// background hashing that overlaps the final round.
#include "engine/verify.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry::engine {
namespace {

std::vector<uint64_t> Expected(const Region& r) {
  std::vector<uint64_t> d(r.page_count());
  PageDigests(r, 0, absl::MakeSpan(d));
  return d;
}

TEST(DigestTableTest, RecordHashesExactlyThePagesOfEachRun) {
  auto a = testing::MakeRegion(1, 16 * 4096, /*seed=*/1, /*fill=*/true);
  std::vector<Region> regions = {a.region};
  absl::StatusOr<std::unique_ptr<DigestTable>> t = DigestTable::Create(regions);
  ASSERT_OK(t);
  // Runs as BuildPageRuns makes them: pages 2-4 and 9.
  std::vector<iovec> runs = {{a.region.page(2), 3 * 4096},
                             {a.region.page(9), 4096}};
  const uint64_t run_offsets[] = {2 * 4096, 9 * 4096};
  (*t)->Record(0, run_offsets, runs);
  const std::vector<uint64_t> want = Expected(a.region);
  absl::Span<const uint64_t> got = (*t)->region(0);
  ASSERT_EQ(got.size(), want.size());
  for (uint64_t p = 0; p < want.size(); ++p) {
    const bool recorded = (p >= 2 && p <= 4) || p == 9;
    EXPECT_EQ(got[p], recorded ? want[p] : 0u) << "page " << p;
  }
}

TEST(BackgroundDigestsTest, HashesEveryPageOfEveryRegion) {
  // Several regions, page sizes and slice boundaries (64 MiB slices).
  auto a = testing::MakeRegion(1, 70ull << 20, 2, true);
  auto b = testing::MakeRegion(2, 3 * 4096, 3, true);
  auto c_mem = testing::MakeRegion(3, 8 << 20, 4, true);
  Region c = c_mem.region;
  c.page_size = 8192;
  std::vector<Region> regions = {a.region, b.region, c};
  for (int threads : {1, 3}) {
    absl::StatusOr<std::unique_ptr<BackgroundDigests>> d =
        BackgroundDigests::Start(regions, threads);
    ASSERT_OK(d);
    (*d)->Finish();
    for (size_t i = 0; i < regions.size(); ++i) {
      const std::vector<uint64_t> want = Expected(regions[i]);
      absl::Span<const uint64_t> got = (*d)->digests().region(i);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin()))
          << "region " << i << " threads " << threads;
    }
  }
}

TEST(BackgroundDigestsTest, DestroyedBeforeFinishStopsItsThreads) {
  auto a = testing::MakeRegion(1, 256ull << 20, 5, true);
  std::vector<Region> regions = {a.region};
  absl::StatusOr<std::unique_ptr<BackgroundDigests>> d =
      BackgroundDigests::Start(regions, 2);
  ASSERT_OK(d);
  d->reset();  // joins without hashing the rest
}

// Holes of a shared file are recorded as zero without being read: a read
// would allocate them (the source would fill in a sparse file to verify
// it).
TEST(BackgroundDigestsTest, HolesOfASharedFileAreZeroWithoutBeingRead) {
  constexpr uint64_t kPages = 64;
  const int fd = memfd_create("ramferry-verify", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kPages * 4096), 0);
  void* m =
      mmap(nullptr, kPages * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED);
  Region r{1, "memfd", m, kPages * 4096, 4096};
  std::fill_n(r.page(3), 4096, 0x33);
  std::fill_n(r.page(40), 100, 0x44);
  auto d = BackgroundDigests::Start({&r, 1}, 2);
  ASSERT_OK(d);
  (*d)->Finish();
  std::vector<uint64_t> want(kPages);
  PageDigests(r, 0, absl::MakeSpan(want));  // reads every page, after
  absl::Span<const uint64_t> got = (*d)->digests().region(0);
  for (uint64_t p = 0; p < kPages; ++p) EXPECT_EQ(got[p], want[p]) << p;
  // Reading the pages for `want` allocated them; count from a fresh file.
  munmap(m, kPages * 4096);
  close(fd);
  const int fd2 = memfd_create("ramferry-verify", MFD_CLOEXEC);
  ASSERT_EQ(ftruncate(fd2, kPages * 4096), 0);
  m = mmap(nullptr, kPages * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd2, 0);
  ASSERT_NE(m, MAP_FAILED);
  Region r2{1, "memfd", m, kPages * 4096, 4096};
  std::fill_n(r2.page(3), 4096, 0x33);
  auto d2 = BackgroundDigests::Start({&r2, 1}, 2);
  ASSERT_OK(d2);
  (*d2)->Finish();
  struct stat st {};
  ASSERT_EQ(fstat(fd2, &st), 0);
  EXPECT_EQ(st.st_blocks * 512, 4096) << "verification allocated holes";
  munmap(m, kPages * 4096);
  close(fd2);
}

}  // namespace
}  // namespace ramferry::engine
