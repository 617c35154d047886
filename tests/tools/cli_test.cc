#include "tools/common/cli.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::cli {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

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
    ASSERT_THAT(
        r, StatusIs(absl::StatusCode::kInvalidArgument,
                    HasSubstr(
                        "is not a rate (like 1gbit, 500mbit, or bytes: 100MB")))
        << bad;
    EXPECT_NE(r.status().message().find("is not a"), std::string::npos)
        << r.status();
  }
}

// argv as a program gets it: writable strings.
struct Argv {
  explicit Argv(std::vector<std::string> args) : strings(std::move(args)) {
    for (std::string& a : strings) pointers.push_back(a.data());
  }
  int argc() const { return static_cast<int>(pointers.size()); }
  std::vector<std::string> strings;
  std::vector<char*> pointers;
};

TEST(AcceptBareFlag, ABareFlagGetsItsValueAndNothingElseChanges) {
  Argv a({"prog", "--postcopy", "-postcopy", "--postcopy=now", "--postcopyx",
          "--json", "postcopy", "--", "--postcopy"});
  AcceptBareFlag(a.argc(), a.pointers.data(), "postcopy", "--postcopy=on");
  const std::vector<std::string> want = {
      "prog",        "--postcopy=on", "--postcopy=on", "--postcopy=now",
      "--postcopyx", "--json",        "postcopy",      "--",
      "--postcopy"};  // after "--": not a flag
  ASSERT_EQ(a.argc(), static_cast<int>(want.size()));
  for (int i = 0; i < a.argc(); ++i) EXPECT_EQ(a.pointers[i], want[i]) << i;
}

TEST(AcceptBareFlag, DashesAndUnderscoresAreTheSameName) {
  Argv a({"prog", "--postcopy-urgent", "--postcopy_urgent"});
  AcceptBareFlag(a.argc(), a.pointers.data(), "postcopy_urgent",
                 "--postcopy_urgent=on");
  EXPECT_EQ(std::string(a.pointers[1]), "--postcopy_urgent=on");
  EXPECT_EQ(std::string(a.pointers[2]), "--postcopy_urgent=on");
}

}  // namespace
}  // namespace ramferry::cli
