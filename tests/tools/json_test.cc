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

TEST(ParseRequestJson, RefusesAKeyTwiceAtAnyDepthAndNamesIt) {
  EXPECT_EQ(ParseRequestJson("{\"a\":1,\"b\":[{\"a\":2}]}")->at("a"), 1);
  for (const char* dup :
       {"{\"cmd\":\"query\",\"cmd\":\"cancel\"}", "[{\"k\":1,\"k\":1}]",
        "{\"o\":{\"p\":{},\"p\":{}}}"}) {
    absl::StatusOr<Json> j = ParseRequestJson(dup);
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument) << dup;
    EXPECT_NE(j.status().message().find("appears twice"),
              absl::string_view::npos)
        << dup;
  }
  EXPECT_EQ(ParseRequestJson("{\"a\":").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ramferry::cli
