// ZeroPages: the destination writes a zero page only where the page does
// not already read as zero.
#include "engine/pages/zero_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry::engine {
namespace {

// Resident pages of [p, p + len), from mincore.
uint64_t Resident(const void* p, size_t len) {
  std::vector<unsigned char> v((len + 4095) / 4096);
  EXPECT_EQ(mincore(const_cast<void*>(p), len, v.data()), 0);
  uint64_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

TEST(ZeroPagesTest, MemoryNotKnownZeroIsWrittenOnlyWhereNotZero) {
  testing::TestRegion r = testing::MakeRegion(1, 8 * 4096);
  std::memset(r.region.page(1), 0x11, 4096);
  r.region.page(5)[4095] = 1;  // only the last byte
  ZeroPages z({&r.region, 1});
  const absl::StatusOr<ZeroPages::Applied> a = z.Zero(0, 0, 8);
  ASSERT_OK(a);
  EXPECT_EQ(a->written, 2u);
  EXPECT_EQ(a->skipped, 6u);
  for (uint64_t off = 0; off < r.region.length; ++off) {
    ASSERT_EQ(static_cast<uint8_t*>(r.region.base)[off], 0) << off;
  }
}

TEST(ZeroPagesTest, MemoryKnownZeroStaysUntouchedUntilDataLands) {
  // 200 pages: whole 64-page words and a tail.
  testing::TestRegion r = testing::MakeRegion(1, 200 * 4096);
  r.region.reads_as_zero = true;
  ZeroPages z({&r.region, 1});
  const uint64_t before = Resident(r.region.base, r.region.length);
  absl::StatusOr<ZeroPages::Applied> a = z.Zero(0, 0, 200);
  ASSERT_OK(a);
  EXPECT_EQ(a->written, 0u);
  EXPECT_EQ(a->skipped, 200u);
  // Nothing was read or written: no page was faulted in.
  EXPECT_EQ(Resident(r.region.base, r.region.length), before);

  // Data lands on pages 70..71 and 150, then they turn zero.
  std::memset(r.region.page(70), 0x22, 2 * 4096);
  std::memset(r.region.page(150), 0x33, 4096);
  const iovec runs[] = {{r.region.page(70), 2 * 4096},
                        {r.region.page(150), 4096}};
  const uint64_t run_offsets[] = {70 * 4096, 150 * 4096};
  z.NoteData(0, run_offsets, runs);
  a = z.Zero(0, 0, 200);
  ASSERT_OK(a);
  EXPECT_EQ(a->written, 3u);
  EXPECT_EQ(a->skipped, 197u);
  for (uint64_t p : {70u, 71u, 150u}) {
    for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(r.region.page(p)[i], 0);
  }
}

}  // namespace
}  // namespace ramferry::engine
