// Runs the project's binaries from tests, as a user would.
#ifndef RAMFERRY_TESTS_SUPPORT_SUBPROCESS_H_
#define RAMFERRY_TESTS_SUPPORT_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace ramferry::testing {

struct CommandResult {
  int exit_code = -1;  // -1: killed by a signal or the timeout
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Runs argv[0] (a path) with its arguments, collecting stdout and stderr;
// killed after `timeout`.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         absl::Duration timeout = absl::Seconds(120));

// A command left running in the background; Wait() collects it.
class BackgroundCommand {
 public:
  explicit BackgroundCommand(const std::vector<std::string>& argv);
  ~BackgroundCommand();
  pid_t pid() const { return pid_; }
  // Waits until stderr contains `text` (true) or the timeout passes.
  bool AwaitStderr(const std::string& text, absl::Duration timeout);
  // Waits for a line starting with `prefix` on stderr and returns the rest
  // of that line ("" after the timeout).
  std::string AwaitStderrLine(const std::string& prefix,
                              absl::Duration timeout);
  // Stderr read so far.
  const std::string& Stderr() const { return result_.err; }
  // Whether the process has not exited yet.
  bool Running();
  CommandResult Wait(absl::Duration timeout = absl::Seconds(120));

 private:
  void Drain(int timeout_ms);
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  CommandResult result_;
};

}  // namespace ramferry::testing

#endif  // RAMFERRY_TESTS_SUPPORT_SUBPROCESS_H_
