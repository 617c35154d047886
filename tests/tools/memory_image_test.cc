// Memory images: the plan covers every page once in the asked-for mix, and
// the fill writes each kind as it says (untouched pages are never faulted).
#include "tools/migrate/memory_image.h"

#include <sys/mman.h>

#include <cctype>
#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::migrate {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;

TEST(MemoryImageTest, ParsesPercentagesAndNamesTheBadPart) {
  absl::StatusOr<MemoryImage> i = MemoryImage::Parse("zero=70,random=30");
  ASSERT_OK(i);
  EXPECT_EQ(i->percent[static_cast<int>(PageKind::kZero)], 70u);
  EXPECT_EQ(i->percent[static_cast<int>(PageKind::kRandom)], 30u);
  EXPECT_EQ(i->ToString(), "zero=70,random=30");
  EXPECT_TRUE(MemoryImage::Parse("random")->all_random());
  EXPECT_EQ(MemoryImage::Parse("random=100")->ToString(), "random");
  for (const char* bad :
       {"zero=70", "zero=70,random=40", "zeros=70,random=30",
        "zero=x,random=100", "zero", "", "zero=-1,random=101"}) {
    absl::StatusOr<MemoryImage> b = MemoryImage::Parse(bad);
    EXPECT_THAT(b, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("memory image")))
        << bad;
    EXPECT_THAT(b.status().message(), HasSubstr("memory image")) << bad;
  }
}

TEST(MemoryImageTest, PlanCoversEveryPageOnceInTheMix) {
  const MemoryImage image =
      *MemoryImage::Parse("zero=50,untouched=20,text=10,random=20");
  const uint64_t pages = 200000;
  const std::vector<PageRun> runs = PlanImage(pages, image, 7);
  uint64_t next = 0, by_kind[kPageKinds] = {};
  uint64_t longest = 0;
  for (const PageRun& r : runs) {
    ASSERT_EQ(r.first, next);
    ASSERT_GE(r.count, 1u);
    next += r.count;
    by_kind[static_cast<int>(r.kind)] += r.count;
    longest = std::max(longest, r.count);
  }
  EXPECT_EQ(next, pages);
  EXPECT_LE(longest, 512u);
  EXPECT_GT(runs.size(), pages / 512);  // runs, not one block per kind
  for (int k = 0; k < kPageKinds; ++k) {
    EXPECT_NEAR(by_kind[k] * 100.0 / pages, image.percent[k], 2.0) << k;
  }
  // Deterministic for a seed; another seed, another layout.
  const std::vector<PageRun> again = PlanImage(pages, image, 7);
  ASSERT_EQ(again.size(), runs.size());
  EXPECT_EQ(again.back().first, runs.back().first);
  EXPECT_NE(PlanImage(pages, image, 8).size(), runs.size());
}

TEST(MemoryImageTest, FillWritesEachKindAndLeavesUntouchedPagesUnfaulted) {
  const uint64_t pages = 4096;
  void* m = mmap(nullptr, pages * 4096, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* base = static_cast<uint8_t*>(m);
  const std::vector<PageRun> runs =
      PlanImage(pages,
                *MemoryImage::Parse("zero=25,untouched=25,text=25,"
                                    "random=25"),
                3);
  const std::vector<uint64_t> counts = FillImage(base, runs, 3);
  std::vector<unsigned char> resident(pages);
  ASSERT_EQ(mincore(m, pages * 4096, resident.data()), 0);
  uint64_t seen[kPageKinds] = {};
  for (const PageRun& r : runs) {
    seen[static_cast<int>(r.kind)] += r.count;
    for (uint64_t p = r.first; p < r.first + r.count; ++p) {
      const uint8_t* page = base + p * 4096;
      switch (r.kind) {
        case PageKind::kUntouched:
          EXPECT_EQ(resident[p] & 1, 0) << p;
          break;
        case PageKind::kZero:
          for (int i = 0; i < 4096; i += 64) ASSERT_EQ(page[i], 0) << p;
          break;
        case PageKind::kText:
          for (int i = 0; i < 4096; ++i) {
            ASSERT_TRUE(std::isprint(page[i]) || page[i] == '\n') << p;
          }
          break;
        case PageKind::kRandom: {
          int zeros = 0;
          for (int i = 0; i < 4096; ++i) zeros += page[i] == 0;
          EXPECT_LT(zeros, 64) << p;
          break;
        }
      }
    }
  }
  for (int k = 0; k < kPageKinds; ++k) EXPECT_EQ(counts[k], seen[k]);
  munmap(m, pages * 4096);
}

}  // namespace
}  // namespace ramferry::migrate
