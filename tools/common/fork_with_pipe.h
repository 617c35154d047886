// A child process with a pipe from it to its parent, for a role that runs
// in a process of its own (the demo's destination, the bench's) and
// reports back over the pipe.
#ifndef RAMFERRY_TOOLS_COMMON_FORK_WITH_PIPE_H_
#define RAMFERRY_TOOLS_COMMON_FORK_WITH_PIPE_H_

#include <sys/types.h>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "base/owned_fd.h"

namespace ramferry::cli {

struct ForkedChild {
  pid_t pid = -1;
  base::OwnedFd from_child;  // the pipe's read end
};

// Forks; the child runs `body` with the pipe's write end and must not
// return (it exits, _exit(1) if it does). Output buffered before the fork
// is flushed first, so it is not written twice. The child is SIGKILLed
// when the thread that called this ends (PR_SET_PDEATHSIG: the parent's
// thread, not its process), so call it from the thread that lives as
// long as the process does (main's): no child outlives its parent. It
// inherits the caller's signal mask.
absl::StatusOr<ForkedChild> ForkWithPipe(
    absl::FunctionRef<void(int write_fd)> body);

}  // namespace ramferry::cli

#endif  // RAMFERRY_TOOLS_COMMON_FORK_WITH_PIPE_H_
