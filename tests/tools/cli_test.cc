#include "tools/common/cli.h"

#include "gtest/gtest.h"

namespace ramferry::cli {
namespace {

TEST(ParseRate, BitsAsTcWritesThem) {
  EXPECT_EQ(*ParseRate("1gbit"), 125'000'000u);
  EXPECT_EQ(*ParseRate("500mbit"), 62'500'000u);
  EXPECT_EQ(*ParseRate("64kbit"), 8'000u);
  EXPECT_EQ(*ParseRate("2.5Gbit"), 312'500'000u);
}

TEST(ParseRate, BytesAsSizesAre) {
  EXPECT_EQ(*ParseRate("100MB"), 100'000'000u);
  EXPECT_EQ(*ParseRate("1GiB"), 1u << 30);
  EXPECT_EQ(*ParseRate("0"), 0u);
}

TEST(ParseRate, NonsenseIsAnErrorThatShowsTheForm) {
  for (const char* bad : {"fast", "gbit", "-1gbit", "1xbit", "1 gigabit"}) {
    absl::StatusOr<uint64_t> r = ParseRate(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("is not a"), std::string::npos)
        << r.status();
  }
}

}  // namespace
}  // namespace ramferry::cli
