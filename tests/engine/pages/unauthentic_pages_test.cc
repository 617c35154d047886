#include "engine/pages/unauthentic_pages.h"

#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/region.h"
#include "tests/support/status_matchers.h"

namespace ramferry::engine {
namespace {

using ::testing::HasSubstr;

std::vector<Region> TwoRegions() {
  Region a;
  a.id = 7;
  a.length = 100 * 4096;
  Region b;
  b.id = 9;
  b.length = 70 * 4096;
  return {a, b};
}

TEST(UnauthenticPagesTest, EmptyUntilMarkedAndAgainOnceCleared) {
  const std::vector<Region> regions = TwoRegions();
  UnauthenticPages u(regions);
  EXPECT_EQ(u.count(), 0u);
  EXPECT_OK(u.CheckEmpty("the session cannot end"));
  u.Clear(0, 0, 100, u.Epoch());  // nothing marked: nothing to do
  u.Mark(1, 60, 20);              // clipped at the region's 70 pages
  EXPECT_EQ(u.count(), 10u);
  EXPECT_TRUE(u.Test(1, 60));
  EXPECT_TRUE(u.Test(1, 69));
  EXPECT_FALSE(u.Test(1, 59));
  EXPECT_FALSE(u.Test(0, 60));  // the other region's page of that number
  u.Mark(1, 65, 2);             // already marked: not counted twice
  EXPECT_EQ(u.count(), 10u);
  u.Clear(1, 55, 8, u.Epoch());  // an authentic copy of pages 55..62
  EXPECT_EQ(u.count(), 7u);
  EXPECT_FALSE(u.Test(1, 62));
  EXPECT_TRUE(u.Test(1, 63));
  u.Clear(1, 63, 7, u.Epoch());
  EXPECT_EQ(u.count(), 0u);
  EXPECT_OK(u.CheckEmpty("x"));
}

// A landing whose read began before a mark may have been written over by
// the marked payload: it does not clear that mark. One that began after
// the mark wrote over it: it does.
TEST(UnauthenticPagesTest, ALandingClearsOnlyMarksMadeBeforeItsReadBegan) {
  const std::vector<Region> regions = TwoRegions();
  UnauthenticPages u(regions);
  u.Mark(0, 10, 1);
  const uint64_t began = u.Epoch();  // a read starts on another channel
  u.Mark(0, 11, 1);                  // a forged write lands meanwhile
  u.Clear(0, 10, 2, began);          // the read's authentic pages 10, 11
  EXPECT_FALSE(u.Test(0, 10));
  EXPECT_TRUE(u.Test(0, 11));
  u.Clear(0, 11, 1, u.Epoch());  // a later re-send of page 11
  EXPECT_EQ(u.count(), 0u);
}

TEST(UnauthenticPagesTest, CheckNamesTheFirstPageAndWhatItForbids) {
  const std::vector<Region> regions = TwoRegions();
  UnauthenticPages u(regions);
  u.Mark(1, 5, 3);
  u.Mark(0, 42, 1);
  absl::Status s = u.CheckEmpty("the session cannot end");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("4 pages"));
  EXPECT_THAT(s.message(), HasSubstr("page 42 of region 7"));
  EXPECT_THAT(s.message(), HasSubstr("tag never checked out"));
  EXPECT_THAT(s.message(), HasSubstr("the session cannot end"));
}

}  // namespace
}  // namespace ramferry::engine
