// Typed enum flags: AbslParseFlag/AbslUnparseFlag for an enum with a
// base::EnumName table (base/named_enum.h), so a value the flag does not
// know is refused by Abseil's flag parsing, before main runs, in
// named_enum's words, offering every choice:
//   Illegal value 'ful' specified for flag 'verify'; unknown --verify
//   'ful'; choose one of: full, sent, off
//
//   enum class VerifyFlag { kFull, kSent, kOff };
//   inline constexpr base::EnumName<VerifyFlag> kVerifyFlags[] = {...};
//   RAMFERRY_ENUM_FLAG(VerifyFlag, kVerifyFlags, "--verify");
//   ABSL_FLAG(VerifyFlag, verify, VerifyFlag::kFull, "...");
//
// Abseil finds the two functions by argument-dependent lookup: expand the
// macro in the enum's own namespace, before the ABSL_FLAG that uses it.
// An enum whose table is private to its .cc (the library's: Compression,
// Protection, ...) goes through the Parse and Name functions that read it,
// with RAMFERRY_ENUM_FLAG_VIA, and so refuses in the same words.
// An optional value ("" for none, such as --role's) is a
// std::optional<Enum> flag, which Abseil builds on these.
#ifndef RAMFERRY_TOOLS_COMMON_ENUM_FLAG_H_
#define RAMFERRY_TOOLS_COMMON_ENUM_FLAG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/named_enum.h"

namespace ramferry::cli {

// Stores `parsed` in `out`, or its refusal in `error`: what an
// AbslParseFlag returns.
template <typename Enum>
bool EnumFlagFrom(const absl::StatusOr<Enum>& parsed, Enum* out,
                  std::string* error) {
  if (!parsed.ok()) {
    *error = std::string(parsed.status().message());
    return false;
  }
  *out = *parsed;
  return true;
}

}  // namespace ramferry::cli

// `Enum` names a type (`Enum* out`), which cannot be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)

// Parses a flag of `Enum` by `table`, refusing in the words of
// base::ParseName with `what` (the flag, "--verify", or what it names).
#define RAMFERRY_ENUM_FLAG(Enum, table, what)                                 \
  [[maybe_unused]] inline bool AbslParseFlag(absl::string_view text,          \
                                             Enum* out, std::string* error) { \
    return ::ramferry::cli::EnumFlagFrom(                                     \
        ::ramferry::base::ParseName(table, what, text), out, error);          \
  }                                                                           \
  [[maybe_unused]] inline std::string AbslUnparseFlag(Enum value) {           \
    return ::ramferry::base::NameOf(table, value);                            \
  }                                                                           \
  static_assert(true, "a semicolon follows the macro")

// The same through the enum's `parse` (text -> absl::StatusOr<Enum>, a
// base::ParseName) and `name` (Enum -> its name) functions.
#define RAMFERRY_ENUM_FLAG_VIA(Enum, parse, name)                             \
  [[maybe_unused]] inline bool AbslParseFlag(absl::string_view text,          \
                                             Enum* out, std::string* error) { \
    return ::ramferry::cli::EnumFlagFrom(parse(text), out, error);            \
  }                                                                           \
  [[maybe_unused]] inline std::string AbslUnparseFlag(Enum value) {           \
    return std::string(name(value));                                          \
  }                                                                           \
  static_assert(true, "a semicolon follows the macro")
// NOLINTEND(bugprone-macro-parentheses)

#endif  // RAMFERRY_TOOLS_COMMON_ENUM_FLAG_H_
