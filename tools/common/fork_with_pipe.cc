#include "tools/common/fork_with_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <utility>

#include "base/errno_status.h"

namespace ramferry::cli {

absl::StatusOr<ForkedChild> ForkWithPipe(
    absl::FunctionRef<void(int write_fd)> body) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return base::ErrnoStatus(errno, "pipe for a child process");
  }
  base::OwnedFd read_end(fds[0]);
  base::OwnedFd write_end(fds[1]);
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) return base::ErrnoStatus(errno, "fork of a child process");
  if (child == 0) {
    read_end = base::OwnedFd();
    body(write_end.get());
    _exit(1);  // body must not return
  }
  return ForkedChild{child, std::move(read_end)};
}

}  // namespace ramferry::cli
