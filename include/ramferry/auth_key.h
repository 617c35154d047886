// The pre-shared key that authenticates a session's connections
// (SessionOptions::auth_key). Both ends must hold the same key.
#ifndef RAMFERRY_AUTH_KEY_H_
#define RAMFERRY_AUTH_KEY_H_

#include <string>

#include "absl/status/statusor.h"

namespace ramferry {

// Reads a key file: any bytes (e.g. `head -c 32 /dev/urandom`), 16 to 1024
// of them; one trailing newline is not part of the key, so a key written
// with `echo` works too. The file must be a regular file that neither group
// nor others can access (like ssh keys); otherwise an error says how to fix
// it.
absl::StatusOr<std::string> ReadAuthKeyFile(const std::string& path);

}  // namespace ramferry

#endif  // RAMFERRY_AUTH_KEY_H_
