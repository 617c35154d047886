// --key-file / --key, shared by the binaries: the session's pre-shared key
// and the loud warning when there is none.
#ifndef RAMFERRY_TOOLS_COMMON_AUTH_FLAGS_H_
#define RAMFERRY_TOOLS_COMMON_AUTH_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"

namespace ramferry::cli {

// The key the flags name: the file's (--key-file), the flag's text
// (--key), or empty when neither is set. Both set is an error.
absl::StatusOr<std::string> AuthKeyFromFlags();

// A fresh random key, for runs that start both ends themselves (--demo).
std::string EphemeralAuthKey();

// Prints, to stderr, that the stream is unauthenticated, when `key` is
// empty; `program` names the binary.
void WarnIfUnauthenticated(const std::string& key, const char* program);

}  // namespace ramferry::cli

#endif  // RAMFERRY_TOOLS_COMMON_AUTH_FLAGS_H_
