// The numeric options' ranges, defined once (engine/option_rules.h), and
// the two ways in that use them: ValidateOptions (every session, and the
// tools' flags through it) and the C API's setters. The named options'
// values, one table each (base/named_enum.h): each name parses back to its
// value, in the library and through the C setter.
#include "engine/option_rules.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/convergence.h"
#include "ramferry/options.h"
#include "ramferry/ramferry.h"
#include "ramferry/transport.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry::engine {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(NumericOptionRules, FoundByEitherSpellingOfTheName) {
  ASSERT_NE(FindNumericOptionRule("packet_pages"), nullptr);
  EXPECT_EQ(FindNumericOptionRule("packet-pages"),
            FindNumericOptionRule("packet_pages"));
  EXPECT_EQ(FindNumericOptionRule("packet"), nullptr);
  EXPECT_EQ(FindNumericOptionRule(""), nullptr);
  for (const NumericOptionRule& rule : NumericOptionRules()) {
    EXPECT_EQ(FindNumericOptionRule(rule.name), &rule);
    EXPECT_LE(rule.min, rule.max) << rule.name;
    // The default is valid: a session left at its defaults runs.
    EXPECT_OK(CheckNumericOption(rule, rule.get(SessionOptions{})))
        << rule.name;
  }
}

TEST(NumericOptionRules, ARefusalNamesTheFieldTheValueAndTheRange) {
  const NumericOptionRule& ring = *FindNumericOptionRule("ring_entries");
  EXPECT_EQ(CheckNumericOption(ring, 3).message(),
            "ring_entries = 3; want a power of two in [2, 1048576]");
  EXPECT_OK(CheckNumericOption(ring, 4));
  const NumericOptionRule& level = *FindNumericOptionRule("compression_level");
  EXPECT_EQ(CheckNumericOption(level, 20).message(),
            "compression_level = 20; want [-100, 19] (zstd's levels)");
  EXPECT_EQ(CheckNumericOption(level, 20).code(),
            absl::StatusCode::kInvalidArgument);
}

// One definition per option (engine/option_rules.h): at and past each end
// of every numeric option's range, and at a value that is not a power of
// two where the range asks for one, ramferry_options_set takes exactly
// what the session's own validator takes, and names a refused value the
// same way. Before, the two kept ranges of their own: packet-pages went
// to 65536 here and to 4096 there, compression-level began at -7 here and
// at -100 there, and rdma-chunk-bytes had no power-of-two rule here.
TEST(NumericOptionRules, TheCSetterAndTheValidatorAgreeOnEveryRange) {
  for (const NumericOptionRule& rule : NumericOptionRules()) {
    std::vector<int64_t> values = {rule.min - 1, rule.min, rule.max,
                                   rule.max + 1};
    if (rule.power_of_two) values.push_back(rule.max - 1);
    const std::string name = absl::StrReplaceAll(rule.name, {{"_", "-"}});
    for (int64_t v : values) {
      SCOPED_TRACE(absl::StrCat(name, " = ", v));
      const bool in_range = v >= rule.min && v <= rule.max &&
                            (!rule.power_of_two || (v & (v - 1)) == 0);
      SessionOptions o = testing::InsecureOptions();
      rule.set(o, v);
      // (-1 in an unsigned field is its largest value: refused too.)
      const absl::Status validator = ValidateOptions(o);
      EXPECT_EQ(validator.ok(), in_range) << validator;
      ramferry_options* opt = ramferry_options_new();
      const ramferry_status set =
          ramferry_options_set(opt, name.c_str(), absl::StrCat(v).c_str());
      EXPECT_EQ(set == RAMFERRY_OK, in_range)
          << ramferry_options_last_error(opt);
      if (!in_range) {
        EXPECT_EQ(set, RAMFERRY_INVALID_ARGUMENT);
        EXPECT_THAT(ramferry_options_last_error(opt),
                    HasSubstr(absl::StrCat(rule.name, " = ", v, "; want")));
        EXPECT_THAT(std::string(validator.message()),
                    HasSubstr(absl::StrCat(rule.name, " = ")));
      }
      if (name == "channels" && v >= 0) {
        EXPECT_EQ(ramferry_options_set_channels(
                      opt, static_cast<uint32_t>(v)) == RAMFERRY_OK,
                  in_range);
      }
      ramferry_options_free(opt);
    }
  }
}

// Parse(Name(v)) == v for every value, and a name that is none of them is
// refused with every name offered.
template <typename Enum, typename NameFn, typename ParseFn>
void ExpectNamesRoundTrip(std::initializer_list<Enum> values, NameFn name,
                          ParseFn parse, const std::string& what) {
  std::vector<std::string> names;
  for (Enum v : values) {
    const std::string n(name(v));
    names.push_back(n);
    absl::StatusOr<Enum> back = parse(n);
    ASSERT_OK(back) << what << " " << n;
    EXPECT_EQ(*back, v) << what << " " << n;
  }
  absl::StatusOr<Enum> bad = parse("no-such-name");
  ASSERT_TRUE(absl::IsInvalidArgument(bad.status())) << what;
  EXPECT_THAT(bad.status().message(),
              HasSubstr(absl::StrCat("unknown ", what, " 'no-such-name'")));
  for (const std::string& n : names) {
    EXPECT_THAT(bad.status().message(), HasSubstr(n)) << what;
  }
}

TEST(NamedOptions, EveryNameParsesBackToItsValue) {
  ExpectNamesRoundTrip({Protection::kAuto, Protection::kNone, Protection::kMac,
                        Protection::kEncrypt},
                       ProtectionName, ParseProtection, "protection");
  ExpectNamesRoundTrip(
      {Compression::kOff, Compression::kOn, Compression::kAuto},
      CompressionName, ParseCompression, "compression");
  ExpectNamesRoundTrip({Delta::kOff, Delta::kOn, Delta::kAuto}, DeltaName,
                       ParseDelta, "delta");
  ExpectNamesRoundTrip(
      {VerifyMode::kFull, VerifyMode::kSent, VerifyMode::kReread},
      VerifyModeName, ParseVerifyMode, "verify mode");
  ExpectNamesRoundTrip({CompletionPolicy::kWrap, CompletionPolicy::kSlot,
                        CompletionPolicy::kEach},
                       CompletionPolicyName, ParseCompletionPolicy,
                       "completion policy");
  ExpectNamesRoundTrip(
      {OnTimeout::kCancel, OnTimeout::kForce, OnTimeout::kPostcopy},
      OnTimeoutName, ParseOnTimeout, "timeout action");
}

// The C setters take the library's names and refuse with its message.
TEST(NamedOptions, TheCSettersTakeTheLibrarysNames) {
  ramferry_options* o = ramferry_options_new();
  ASSERT_NE(o, nullptr);
  for (Compression c :
       {Compression::kOff, Compression::kOn, Compression::kAuto}) {
    EXPECT_EQ(ramferry_options_set_compression(o, CompressionName(c)),
              RAMFERRY_OK)
        << CompressionName(c) << ": " << ramferry_options_last_error(o);
  }
  for (VerifyMode m :
       {VerifyMode::kFull, VerifyMode::kSent, VerifyMode::kReread}) {
    EXPECT_EQ(ramferry_options_set_verify(o, VerifyModeName(m)), RAMFERRY_OK)
        << VerifyModeName(m) << ": " << ramferry_options_last_error(o);
  }
  for (Delta d : {Delta::kOff, Delta::kOn, Delta::kAuto}) {
    EXPECT_EQ(ramferry_options_set(o, "delta", DeltaName(d)), RAMFERRY_OK)
        << DeltaName(d) << ": " << ramferry_options_last_error(o);
  }
  EXPECT_EQ(ramferry_options_set(o, "delta", "xbzrle"),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(ramferry_options_last_error(o),
              HasSubstr(std::string(ParseDelta("xbzrle").status().message())));
  EXPECT_EQ(ramferry_options_set_compression(o, "zip"),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(
      ramferry_options_last_error(o),
      HasSubstr(std::string(ParseCompression("zip").status().message())));
  EXPECT_EQ(ramferry_options_set_verify(o, "maybe"), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_THAT(
      ramferry_options_last_error(o),
      HasSubstr(std::string(ParseVerifyMode("maybe").status().message())));
  ramferry_options_free(o);
}

// SetOption (ramferry/options.h), what the C API's ramferry_options_set
// runs: each kind of field from its text, either spelling of the name,
// and a refusal that leaves the options as they were.
TEST(SetOption, SetsEachKindOfFieldFromItsText) {
  SessionOptions o;
  EXPECT_OK(SetOption(o, "packet-pages", "512"));
  EXPECT_EQ(o.packet_pages, 512u);
  EXPECT_OK(SetOption(o, "zero_pages", "off"));
  EXPECT_FALSE(o.zero_pages);
  EXPECT_OK(SetOption(o, "stall-timeout-ms", "2500"));
  EXPECT_EQ(o.stall_timeout, absl::Milliseconds(2500));
  EXPECT_OK(SetOption(o, "delta", "auto"));
  EXPECT_EQ(o.delta, Delta::kAuto);
  EXPECT_OK(SetOption(o, "channel-endpoints", "10.0.0.1:7000,[::1]:7001"));
  ASSERT_EQ(o.channel_endpoints.size(), 2u);
  EXPECT_EQ(o.channel_endpoints[1].host, "::1");
  EXPECT_EQ(o.channel_endpoints[1].port, 7001);
}

TEST(SetOption, ARefusedValueChangesNothingAndAnUnknownNameListsThem) {
  SessionOptions o;
  const SessionOptions before = o;
  EXPECT_THAT(SetOption(o, "ring-entries", "3"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ring_entries = 3; want a power of two")));
  EXPECT_THAT(SetOption(o, "packet-pages", "0x10"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("want a whole number, not '0x10'")));
  EXPECT_THAT(SetOption(o, "zero-pages", "maybe"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("zero-pages: want 1/0")));
  EXPECT_THAT(
      SetOption(o, "channel-endpoints", "a:1,b"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not 'b'")));
  EXPECT_EQ(o.packet_pages, before.packet_pages);
  EXPECT_EQ(o.ring_entries, before.ring_entries);
  EXPECT_EQ(o.zero_pages, before.zero_pages);
  EXPECT_TRUE(o.channel_endpoints.empty());
  EXPECT_THAT(SetOption(o, "host", "x"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("no option 'host'"),
                             HasSubstr("packet-pages (1.."),
                             HasSubstr("zero-pages (1|0)"),
                             HasSubstr("set as themselves"))));
}

}  // namespace
}  // namespace ramferry::engine
