// JSON for the binaries' reports, written with nlohmann::json.
#ifndef RAMFERRY_TOOLS_COMMON_JSON_H_
#define RAMFERRY_TOOLS_COMMON_JSON_H_

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ramferry::cli {

// Keys stay in the order they are written: a report reads top-down.
using Json = nlohmann::ordered_json;

// Compact JSON of `j`. Text that is not UTF-8 (a file name, a peer's
// error message) is written with U+FFFD in place of its bad bytes instead
// of throwing, so a report never fails for what it quotes.
std::string DumpJson(const Json& j);

// A JSON document another process printed. One that does not parse is
// kept as {"unparsed": text}, so the report stays a valid document and
// the text is not lost.
Json ParseForeignJson(absl::string_view text);

// One JSON document from a peer that steers this process (a control
// request). Refused with INVALID_ARGUMENT: text that is not JSON, and an
// object with a key twice at any depth (parsers disagree on which one
// counts, so a filter in front could read another request than this
// process would run).
absl::StatusOr<Json> ParseRequestJson(absl::string_view text);

}  // namespace ramferry::cli

#endif  // RAMFERRY_TOOLS_COMMON_JSON_H_
