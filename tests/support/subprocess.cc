#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/time/clock.h"

namespace ramferry::testing {

BackgroundCommand::BackgroundCommand(const std::vector<std::string>& argv) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    std::vector<char*> args;
    for (const std::string& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
}

BackgroundCommand::~BackgroundCommand() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
  if (err_fd_ >= 0) close(err_fd_);
}

void BackgroundCommand::Drain(int timeout_ms) {
  pollfd p[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
  if (poll(p, 2, timeout_ms) <= 0) return;
  char buf[65536];
  for (int i = 0; i < 2; ++i) {
    if (p[i].revents == 0 || p[i].fd < 0) continue;
    ssize_t n = read(p[i].fd, buf, sizeof buf);
    std::string& dst = i == 0 ? result_.out : result_.err;
    if (n > 0) {
      dst.append(buf, n);
    } else {
      close(p[i].fd);
      (i == 0 ? out_fd_ : err_fd_) = -1;
    }
  }
}

bool BackgroundCommand::AwaitStderr(const std::string& text,
                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (result_.err.find(text) == std::string::npos) {
    if (absl::Now() >= deadline || err_fd_ < 0) return false;
    Drain(50);
  }
  return true;
}

std::string BackgroundCommand::AwaitStderrLine(const std::string& prefix,
                                               absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (size_t at = result_.err.find(prefix); at != std::string::npos) {
      const size_t from = at + prefix.size();
      if (size_t nl = result_.err.find('\n', from); nl != std::string::npos) {
        return result_.err.substr(from, nl - from);
      }
    }
    if (absl::Now() >= deadline || err_fd_ < 0) return "";
    Drain(50);
  }
}

bool BackgroundCommand::Running() {
  if (result_.exit_code != -1 || pid_ < 0) return false;
  // WNOWAIT: look without reaping, so Wait() still collects the status.
  siginfo_t info{};
  if (waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    return false;
  }
  return info.si_pid == 0;
}

CommandResult BackgroundCommand::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (out_fd_ >= 0 || err_fd_ >= 0) {
    if (absl::Now() >= deadline) {
      kill(pid_, SIGKILL);
      result_.timed_out = true;
      break;
    }
    Drain(50);
  }
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  result_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result_;
}

CommandResult RunCommand(const std::vector<std::string>& argv,
                         absl::Duration timeout) {
  return BackgroundCommand(argv).Wait(timeout);
}

}  // namespace ramferry::testing
