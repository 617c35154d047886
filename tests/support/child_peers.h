// Session peers in forked child processes, so a test can stop (SIGSTOP) or
// kill (SIGKILL) one end for real. Construct them while the test process
// has a single thread: fork() copies only the calling thread.
#ifndef RAMFERRY_TESTS_SUPPORT_CHILD_PEERS_H_
#define RAMFERRY_TESTS_SUPPORT_CHILD_PEERS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "ramferry/options.h"

namespace ramferry::testing {

// A destination: Receiver::Listen(options) over a fresh region of `bytes`,
// then Serve, reporting how Serve ended. Killed when destroyed.
class ChildDestination {
 public:
  ChildDestination(const SessionOptions& options, uint64_t bytes);
  ~ChildDestination();
  ChildDestination(const ChildDestination&) = delete;
  ChildDestination& operator=(const ChildDestination&) = delete;

  uint16_t port() const { return port_; }
  // Returns once a SIGSTOP has taken effect (kill only queues it), so the
  // child cannot still answer whatever the test does next.
  void Signal(int sig);
  // How Serve() ended, as Status::ToString(); "" if the child said nothing
  // before exiting or the timeout.
  std::string AwaitResult(absl::Duration timeout);

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  uint16_t port_ = 0;
};

// A source over a region of `bytes` filled from `seed`: once told the
// destination's port, it connects with `options` and sends whole rounds,
// `rounds` of them and then idles (its session alive, heartbeating), or
// with `rounds` 0 until killed. Killed when destroyed.
class ChildSource {
 public:
  ChildSource(const SessionOptions& options, uint64_t bytes, uint64_t seed,
              int rounds = 0);
  ~ChildSource();
  ChildSource(const ChildSource&) = delete;
  ChildSource& operator=(const ChildSource&) = delete;

  // Tells the child where to connect; false if it could not be told.
  bool Connect(uint16_t port);
  // As ChildDestination::Signal.
  void Signal(int sig);
  // SIGKILL, and reaps it.
  void Kill();

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

}  // namespace ramferry::testing

#endif  // RAMFERRY_TESTS_SUPPORT_CHILD_PEERS_H_
