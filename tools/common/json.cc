#include "tools/common/json.h"

#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ramferry::cli {

std::string DumpJson(const Json& j) {
  return j.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false,
                Json::error_handler_t::replace);
}

Json ParseForeignJson(absl::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded()) return Json{{"unparsed", std::string(text)}};
  return j;
}

absl::StatusOr<Json> ParseRequestJson(absl::string_view text) {
  // The keys of each object open at this point, innermost last.
  std::vector<std::set<std::string>> open;
  std::string duplicate;
  bool found = false;
  Json j = Json::parse(
      text.begin(), text.end(),
      [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
        switch (event) {
          case Json::parse_event_t::object_start:
            open.emplace_back();
            break;
          case Json::parse_event_t::object_end:
            if (!open.empty()) open.pop_back();
            break;
          case Json::parse_event_t::key:
            if (!open.empty() && !found &&
                !open.back().insert(parsed.get<std::string>()).second) {
              found = true;
              duplicate = parsed.get<std::string>();
            }
            break;
          default:
            break;
        }
        return true;
      },
      /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(
        "a request is one JSON object per line, such as {\"cmd\": "
        "\"query\"}");
  }
  if (found) {
    return absl::InvalidArgumentError(
        absl::StrCat("the key ", DumpJson(Json(duplicate)),
                     " appears twice in one object: give each key once"));
  }
  return j;
}

}  // namespace ramferry::cli
