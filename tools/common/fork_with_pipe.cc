#include "tools/common/fork_with_pipe.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
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
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) return base::ErrnoStatus(errno, "fork of a child process");
  if (child == 0) {
    // The child dies with its parent, however the parent ends (SIGKILL
    // included): a parent that died before this line is caught by the
    // getppid() check, as the death signal is only armed from here on.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) {
      _exit(1);
    }
    read_end = base::OwnedFd();
    body(write_end.get());
    _exit(1);  // body must not return
  }
  return ForkedChild{child, std::move(read_end)};
}

}  // namespace ramferry::cli
