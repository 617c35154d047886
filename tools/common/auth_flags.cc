#include "tools/common/auth_flags.h"

#include <sys/random.h>

#include <cstdio>

#include "absl/flags/flag.h"
#include "base/status_macros.h"
#include "ramferry/auth_key.h"
#include "ramferry/options.h"
#include "tools/common/enum_flag.h"

namespace ramferry {
RAMFERRY_ENUM_FLAG_VIA(Protection, ParseProtection, ProtectionName);
}  // namespace ramferry

ABSL_FLAG(std::string, key_file, "",
          "pre-shared key file (16-1024 bytes, mode 0600; e.g. head -c 32 "
          "/dev/urandom > key): every connection proves it with HMAC-SHA256 "
          "challenge-response; both ends need the same key");
ABSL_FLAG(std::string, key, "",
          "the pre-shared key as text (visible to other users in the process "
          "list: prefer --key-file)");
ABSL_FLAG(bool, insecure, false,
          "run without a key, which both ends otherwise refuse: anything "
          "that reaches the destination's port can connect and write into "
          "its memory, and the source may be sending to an impostor. Only "
          "on a network you trust");
ABSL_FLAG(ramferry::Protection, protect, ramferry::Protection::kAuto,
          "what guards the stream after each connection's handshake: mac "
          "(every message and packet carries an AES-256-GCM tag; the "
          "default with a key), encrypt (and every payload is encrypted), "
          "none (connections authenticated only; rdma's only choice), or "
          "auto. The destination refuses a source that asks for less than "
          "it does");

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

absl::Status ApplyAuthFlags(SessionOptions* options) {
  RAMFERRY_ASSIGN_OR_RETURN(std::string key, AuthKeyFromFlags());
  options->auth_key = key;
  options->insecure = absl::GetFlag(FLAGS_insecure);
  options->protect = absl::GetFlag(FLAGS_protect);
  return absl::OkStatus();
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

void WarnIfUnauthenticated(const SessionOptions& options, const char* program) {
  if (!options.auth_key.empty()) return;
  std::fprintf(stderr,
               "%s: WARNING: --insecure: this stream is UNAUTHENTICATED and "
               "UNPROTECTED. Any host that reaches the destination's port "
               "can connect and write into its memory, and anyone on the "
               "path can read and alter the pages. Give both ends "
               "--key-file instead.\n",
               program);
}

}  // namespace ramferry::cli
