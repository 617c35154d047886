// An enum's names in one table, read by its Name and Parse functions, so
// each value is spelled once and every refusal reads alike:
//   unknown protection 'macc'; choose one of: auto, none, mac, encrypt
// A table lists each value once under the name it prints as; an alias row
// (an older spelling still accepted, such as "true" for "on") is parsed
// but never printed or offered.
#ifndef RAMFERRY_BASE_NAMED_ENUM_H_
#define RAMFERRY_BASE_NAMED_ENUM_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ramferry::base {

template <typename Enum>
struct EnumName {
  Enum value;
  const char* name;
  // What the value does, shown beside the name in a refusal where a bare
  // name would not tell a user which to choose; "" for none.
  const char* doc = "";
  bool alias = false;
};

// The value's printed name; "unknown" for a value not in the table (a cast
// integer), which names no choice, so it cannot be parsed back as one.
template <typename Enum, size_t N>
constexpr const char* NameOf(const EnumName<Enum> (&table)[N], Enum value) {
  for (const EnumName<Enum>& e : table) {
    if (!e.alias && e.value == value) return e.name;
  }
  return "unknown";
}

// The refusal of `text`, which names none of `choices` (comma-separated):
// for a set of names that is not an EnumName table (the transport
// families).
inline absl::Status UnknownName(absl::string_view what, absl::string_view text,
                                absl::string_view choices) {
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown ", what, " '", text, "'; choose one of: ", choices));
}

// The value named `text`, exactly (case matters); INVALID_ARGUMENT naming
// `what` and every choice otherwise.
template <typename Enum, size_t N>
absl::StatusOr<Enum> ParseName(const EnumName<Enum> (&table)[N],
                               absl::string_view what, absl::string_view text) {
  std::string choices;
  for (const EnumName<Enum>& e : table) {
    if (text == e.name) return e.value;
    if (e.alias) continue;
    absl::StrAppend(&choices, choices.empty() ? "" : ", ", e.name);
    if (*e.doc != '\0') absl::StrAppend(&choices, " (", e.doc, ")");
  }
  return UnknownName(what, text, choices);
}

}  // namespace ramferry::base

#endif  // RAMFERRY_BASE_NAMED_ENUM_H_
