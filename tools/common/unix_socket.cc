#include "tools/common/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"
#include "base/status_macros.h"

namespace ramferry::cli {
namespace {

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path,
                                        const std::string& what) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " path '", path, "' must be 1 to ",
                     sizeof(addr.sun_path) - 1, " bytes long"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// Whatever is at `path` may be replaced: nothing, or a socket nobody
// listens on (left by a process that died).
absl::Status ClearStaleSocket(const std::string& path, const std::string& what,
                              const sockaddr_un& a) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return base::ErrnoStatus(errno, absl::StrCat(what, " ", path));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " path ", path,
                     " exists and is not a socket: remove it or choose "
                     "another path"));
  }
  base::OwnedFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return base::ErrnoStatus(errno, "socket(AF_UNIX)");
  if (connect(probe.get(), reinterpret_cast<const sockaddr*>(&a), sizeof(a)) ==
      0) {
    return absl::AlreadyExistsError(
        absl::StrCat("another process serves the ", what, " ", path,
                     ": give each migration its own path"));
  }
  if (errno != ECONNREFUSED) {
    return base::ErrnoStatus(errno, absl::StrCat("probing ", what, " ", path));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return base::ErrnoStatus(errno,
                             absl::StrCat("removing stale socket ", path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<base::OwnedFd> ListenUnix(const std::string& path,
                                         const std::string& what,
                                         bool nonblocking) {
  RAMFERRY_ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path, what));
  RAMFERRY_RETURN_IF_ERROR(ClearStaleSocket(path, what, addr));
  base::OwnedFd fd(socket(
      AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0),
      0));
  if (!fd.valid()) return base::ErrnoStatus(errno, "socket(AF_UNIX)");
  // bind() creates the file with the socket inode's mode less the umask:
  // 0600 from the start, with no window in which others could connect.
  if (fchmod(fd.get(), 0600) != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("fchmod(", what, ")"));
  }
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    return base::ErrnoStatus(errno, absl::StrCat("binding ", what, " ", path));
  }
  if (chmod(path.c_str(), 0600) != 0 || listen(fd.get(), 16) != 0) {
    const int err = errno;
    unlink(path.c_str());
    return base::ErrnoStatus(err, absl::StrCat(what, " ", path));
  }
  return fd;
}

absl::StatusOr<base::OwnedFd> ConnectUnix(const std::string& path,
                                          const std::string& what,
                                          absl::Time deadline) {
  RAMFERRY_ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path, what));
  while (true) {
    base::OwnedFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return base::ErrnoStatus(errno, "socket(AF_UNIX)");
    if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr),
                sizeof(addr)) == 0) {
      return fd;
    }
    const int err = errno;
    const bool not_yet = err == ENOENT || err == ECONNREFUSED;
    if (!not_yet || absl::Now() >= deadline) {
      return base::ErrnoStatus(
          err, absl::StrCat("connecting to the ", what, " ", path,
                            not_yet ? " (nobody listened there in time)" : ""));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace ramferry::cli
