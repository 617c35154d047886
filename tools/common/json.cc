#include "tools/common/json.h"

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

}  // namespace ramferry::cli
