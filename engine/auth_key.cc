#include "ramferry/auth_key.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_format.h"
#include "proto/auth.h"

namespace ramferry {
namespace {

absl::Status FileError(int err, absl::string_view what,
                       const std::string& path) {
  return absl::Status(
      absl::ErrnoToStatusCode(err),
      absl::StrFormat("%s key file %s: %s", what, path, strerrordesc_np(err)));
}

}  // namespace

absl::StatusOr<std::string> ReadAuthKeyFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return FileError(errno, "inspecting", path);
  }
  absl::Cleanup closer = [fd] { close(fd); };
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return FileError(errno, "inspecting", path);
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("key file %s is not a regular file", path));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "key file %s is accessible to group or others (mode %04o); "
        "run: chmod 600 %s",
        path, st.st_mode & 07777, path));
  }
  // One byte past the limit tells a too-long file from a full one.
  std::string key(proto::kMaxAuthKeyBytes + 2, '\0');
  size_t got = 0;
  while (got < key.size()) {
    ssize_t n = read(fd, key.data() + got, key.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return FileError(errno, "reading", path);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  key.resize(got);
  if (!key.empty() && key.back() == '\n') key.pop_back();
  if (absl::Status s = proto::ValidateAuthKey(key); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("key file %s: %s", path, s.message()));
  }
  return key;
}

}  // namespace ramferry
