#include "tools/common/enum_flag.h"

#include <optional>
#include <string>

#include "absl/flags/marshalling.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/named_enum.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/common/channel_flags.h"
#include "tools/migrate/flags.h"

namespace ramferry::cli {
namespace {

using ::testing::HasSubstr;

enum class Speed { kSlow, kFast, kLudicrous };
constexpr base::EnumName<Speed> kSpeedNames[] = {
    {Speed::kSlow, "slow"},
    {Speed::kFast, "fast"},
    {Speed::kLudicrous, "ludicrous", "past light"},
    {Speed::kFast, "quick", "", /*alias=*/true},
};
RAMFERRY_ENUM_FLAG(Speed, kSpeedNames, "--speed");

// An enum whose table only its functions see, as the library's are.
enum class Shade { kLight, kDark };
absl::StatusOr<Shade> ParseShade(absl::string_view text) {
  static constexpr base::EnumName<Shade> kNames[] = {{Shade::kLight, "light"},
                                                     {Shade::kDark, "dark"}};
  return base::ParseName(kNames, "shade", text);
}
const char* ShadeName(Shade s) { return s == Shade::kDark ? "dark" : "light"; }
RAMFERRY_ENUM_FLAG_VIA(Shade, ParseShade, ShadeName);

// absl::ParseFlag is what the command line's parsing calls.
template <typename T>
std::string Refusal(absl::string_view text) {
  T value{};
  std::string error;
  EXPECT_FALSE(absl::ParseFlag(text, &value, &error)) << text;
  return error;
}

TEST(EnumFlag, ParsesEveryNameAndAnAlias) {
  Speed s{};
  std::string error;
  ASSERT_TRUE(absl::ParseFlag("ludicrous", &s, &error)) << error;
  EXPECT_EQ(s, Speed::kLudicrous);
  ASSERT_TRUE(absl::ParseFlag("slow", &s, &error)) << error;
  EXPECT_EQ(s, Speed::kSlow);
  ASSERT_TRUE(absl::ParseFlag("quick", &s, &error)) << error;
  EXPECT_EQ(s, Speed::kFast);
}

TEST(EnumFlag, UnparsesToTheNameNotTheAlias) {
  EXPECT_EQ(absl::UnparseFlag(Speed::kFast), "fast");
  EXPECT_EQ(absl::UnparseFlag(Speed::kLudicrous), "ludicrous");
  EXPECT_EQ(absl::UnparseFlag(Shade::kDark), "dark");
}

TEST(EnumFlag, RefusesInNamedEnumsWordsOfferingEveryChoice) {
  EXPECT_EQ(Refusal<Speed>("warp"),
            "unknown --speed 'warp'; choose one of: slow, fast, ludicrous "
            "(past light)");
  // Case matters, as named_enum's does.
  EXPECT_THAT(Refusal<Speed>("Fast"), HasSubstr("unknown --speed 'Fast'"));
  EXPECT_EQ(Refusal<Shade>("grey"),
            "unknown shade 'grey'; choose one of: light, dark");
}

TEST(EnumFlag, AnOptionalFlagIsNoneWhenEmpty) {
  std::optional<Speed> s = Speed::kSlow;
  std::string error;
  ASSERT_TRUE(absl::ParseFlag("", &s, &error)) << error;
  EXPECT_FALSE(s.has_value());
  ASSERT_TRUE(absl::ParseFlag("fast", &s, &error)) << error;
  EXPECT_EQ(s, Speed::kFast);
  EXPECT_THAT(Refusal<std::optional<Speed>>("warp"),
              HasSubstr("choose one of: slow, fast"));
}

TEST(EnumFlag, TransportTakesAKindOrAuto) {
  TransportFlag t;
  std::string error;
  ASSERT_TRUE(absl::ParseFlag("auto", &t, &error)) << error;
  EXPECT_FALSE(t.kind.has_value());
  EXPECT_EQ(absl::UnparseFlag(t), "auto");
  ASSERT_TRUE(absl::ParseFlag("tcp", &t, &error)) << error;
  EXPECT_EQ(t.kind, TransportKind::kTcp);
  EXPECT_EQ(absl::UnparseFlag(t), "tcp");
  const std::string refusal = Refusal<TransportFlag>("carrier-pigeon");
  EXPECT_THAT(refusal, HasSubstr("unknown transport 'carrier-pigeon'; "
                                 "choose one of: tcp"));
  EXPECT_THAT(refusal, HasSubstr(", auto"));
}

TEST(EnumFlag, MigrateFlagsRefuseAlike) {
  using migrate::PrefaultFlag;
  using migrate::VerifyFlag;
  EXPECT_EQ(Refusal<VerifyFlag>("ful"),
            "unknown --verify 'ful'; choose one of: full, sent, off");
  EXPECT_EQ(Refusal<std::optional<migrate::Role>>("src"),
            "unknown --role 'src'; choose one of: source, dest");
  EXPECT_EQ(Refusal<PrefaultFlag>("lazily"),
            "unknown --prefault 'lazily'; choose one of: off, before, "
            "during, idle, auto");
  PrefaultFlag p;
  std::string error;
  ASSERT_TRUE(absl::ParseFlag("true", &p, &error)) << error;  // an alias
  EXPECT_EQ(absl::UnparseFlag(p), "before");
  ASSERT_TRUE(absl::ParseFlag("auto", &p, &error)) << error;
  EXPECT_EQ(absl::UnparseFlag(p), "auto");
  EXPECT_EQ(absl::UnparseFlag(migrate::PostcopyMode::kAuto), "auto");
}

}  // namespace
}  // namespace ramferry::cli
