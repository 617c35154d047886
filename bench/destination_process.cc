#include "bench/destination_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "tools/common/fork_with_pipe.h"

namespace ramferry::bench {

absl::StatusOr<std::unique_ptr<DestinationProcess>> DestinationProcess::Fork(
    absl::FunctionRef<void(int report_fd)> body) {
  RAMFERRY_ASSIGN_OR_RETURN(cli::ForkedChild child, cli::ForkWithPipe(body));
  return std::unique_ptr<DestinationProcess>(
      new DestinationProcess(child.pid, child.from_child.Release()));
}

DestinationProcess::~DestinationProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    Reap();
  }
  close(fd_);
}

void DestinationProcess::Reap() {
  if (pid_ <= 0) return;
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

absl::StatusOr<std::string> DestinationProcess::ReadLine(
    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  size_t end;
  while ((end = unread_.find('\n')) == std::string::npos) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    pollfd p{fd_, POLLIN, 0};
    if (ms <= 0 || poll(&p, 1, static_cast<int>(ms)) <= 0) {
      return absl::DeadlineExceededError("destination process did not answer");
    }
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) {
      return absl::UnavailableError("destination process exited early");
    }
    unread_.append(buf, static_cast<size_t>(n));
  }
  std::string line = unread_.substr(0, end);
  unread_.erase(0, end + 1);
  if (absl::StartsWith(line, "error ")) {
    return absl::InternalError("destination: " + line.substr(6));
  }
  return line;
}

void ReportLine(int report_fd, const std::string& line) {
  const std::string l = line + "\n";
  (void)!write(report_fd, l.data(), l.size());
}

}  // namespace ramferry::bench
