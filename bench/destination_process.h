// The destination half of a bench run, in a forked child so that each
// side's CPU time is its own. The child reports to the parent in lines on
// a pipe; "error <why>" is how it says it failed.
#ifndef RAMFERRY_BENCH_DESTINATION_PROCESS_H_
#define RAMFERRY_BENCH_DESTINATION_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ramferry::bench {

class DestinationProcess {
 public:
  // Forks a child that runs `body` with the pipe's write end; `body` must
  // not return (it ends with _exit).
  static absl::StatusOr<std::unique_ptr<DestinationProcess>> Fork(
      absl::FunctionRef<void(int report_fd)> body);
  // Kills the child if it still runs, and reaps it.
  ~DestinationProcess();

  // The child's next line, without its newline, waiting up to `timeout`;
  // an "error <why>" line is returned as an error.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);
  // Waits for the child to exit (it has said its last line).
  void Reap();

 private:
  DestinationProcess(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  pid_t pid_;
  int fd_;
  std::string unread_;  // received, not yet returned as lines
};

// Writes one line to the parent, from the child.
void ReportLine(int report_fd, const std::string& line);

}  // namespace ramferry::bench

#endif  // RAMFERRY_BENCH_DESTINATION_PROCESS_H_
