// --key-file / --key, shared by the binaries: the session's pre-shared key
// and the loud warning when there is none.
#ifndef RAMFERRY_TOOLS_COMMON_AUTH_FLAGS_H_
#define RAMFERRY_TOOLS_COMMON_AUTH_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "ramferry/options.h"

namespace ramferry::cli {

// The key the flags name: the file's (--key-file), the flag's text
// (--key), or empty when neither is set. Both set is an error.
absl::StatusOr<std::string> AuthKeyFromFlags();

// Sets the session's key (AuthKeyFromFlags), `insecure` (--insecure) and
// `protect` (--protect) from the flags.
absl::Status ApplyAuthFlags(SessionOptions* options);

// A fresh random key, for runs that start both ends themselves (--demo).
std::string EphemeralAuthKey();

// Prints, to stderr, that the stream is unauthenticated, when the session
// has no key; `program` names the binary.
void WarnIfUnauthenticated(const SessionOptions& options, const char* program);

}  // namespace ramferry::cli

#endif  // RAMFERRY_TOOLS_COMMON_AUTH_FLAGS_H_
