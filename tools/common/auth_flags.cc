#include "tools/common/auth_flags.h"

#include <sys/random.h>

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "ramferry/auth_key.h"

ABSL_FLAG(std::string, key_file, "",
          "pre-shared key file (16-1024 bytes, mode 0600; e.g. head -c 32 "
          "/dev/urandom > key): every connection proves it with HMAC-SHA256 "
          "challenge-response; both ends need the same key");
ABSL_FLAG(std::string, key, "",
          "the pre-shared key as text (visible to other users in the process "
          "list: prefer --key-file)");

namespace ramferry::cli {

absl::StatusOr<std::string> AuthKeyFromFlags() {
  const std::string file = absl::GetFlag(FLAGS_key_file);
  const std::string text = absl::GetFlag(FLAGS_key);
  if (!file.empty() && !text.empty()) {
    return absl::InvalidArgumentError("give --key-file or --key, not both");
  }
  if (!file.empty()) return ReadAuthKeyFile(file);
  return text;
}

std::string EphemeralAuthKey() {
  std::string key(32, '\0');
  size_t got = 0;
  while (got < key.size()) {
    ssize_t n = getrandom(key.data() + got, key.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return key;
}

void WarnIfUnauthenticated(const std::string& key, const char* program) {
  if (!key.empty()) return;
  std::fprintf(stderr,
               "%s: WARNING: no key: this stream is UNAUTHENTICATED. Any "
               "host that reaches the destination's port can connect and "
               "write into its memory. Give both ends --key-file.\n",
               program);
}

}  // namespace ramferry::cli
