// The reports' JSON: what they quote cannot make them fail or invalid.
#include "tools/common/json.h"

#include <string>

#include "gtest/gtest.h"

namespace ramferry::cli {
namespace {

TEST(DumpJson, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  const std::string path = "/dev/shm/ram\xff\xfe.img";
  const std::string out = DumpJson(Json{{"region", path}});
  EXPECT_EQ(out, "{\"region\":\"/dev/shm/ram\xEF\xBF\xBD\xEF\xBF\xBD.img\"}");
  EXPECT_FALSE(Json::parse(out, nullptr, false).is_discarded());
}

TEST(DumpJson, KeepsTheOrderKeysWereWrittenIn) {
  Json j;
  j["z"] = 1;
  j["a"] = 2;
  EXPECT_EQ(DumpJson(j), R"({"z":1,"a":2})");
}

TEST(ParseForeignJson, ADocumentIsKeptAsItIs) {
  const Json j = ParseForeignJson(R"({"role":"destination","ok":true})");
  EXPECT_EQ(j["role"], "destination");
  EXPECT_EQ(j["ok"], true);
}

TEST(ParseForeignJson, TextThatIsNotJsonIsQuotedNotLost) {
  const Json j = ParseForeignJson("destination crashed: {\"half");
  EXPECT_EQ(j["unparsed"], "destination crashed: {\"half");
  EXPECT_FALSE(Json::parse(DumpJson(j), nullptr, false).is_discarded());
}

}  // namespace
}  // namespace ramferry::cli
