#include "tests/support/child_peers.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/test_support.h"

namespace ramferry::testing {

ChildDestination::ChildDestination(const SessionOptions& options,
                                   uint64_t bytes) {
  int to_parent[2];
  EXPECT_EQ(pipe(to_parent), 0);
  pid_ = fork();
  if (pid_ == 0) {
    close(to_parent[0]);
    auto dst = MakeRegion(1, bytes);
    auto rx = Receiver::Listen(options, {&dst.region, 1});
    uint16_t port = rx.ok() ? (*rx)->port() : 0;
    (void)!write(to_parent[1], &port, sizeof port);
    if (!rx.ok()) _exit(1);
    const std::string said = (*rx)->Serve().ToString();
    (void)!write(to_parent[1], said.data(), said.size());
    _exit(0);
  }
  close(to_parent[1]);
  fd_ = to_parent[0];
  EXPECT_EQ(read(fd_, &port_, sizeof port_),
            static_cast<ssize_t>(sizeof port_));
}

ChildDestination::~ChildDestination() {
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  close(fd_);
}

namespace {

void SignalChild(pid_t pid, int sig) {
  kill(pid, sig);
  if (sig == SIGSTOP) {
    int status = 0;
    waitpid(pid, &status, WUNTRACED);
  }
}

}  // namespace

void ChildDestination::Signal(int sig) { SignalChild(pid_, sig); }

std::string ChildDestination::AwaitResult(absl::Duration timeout) {
  std::string out;
  const absl::Time deadline = absl::Now() + timeout;
  char buf[512];
  while (absl::Now() < deadline) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

ChildSource::ChildSource(const SessionOptions& options, uint64_t bytes,
                         uint64_t seed, int rounds) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  pid_ = fork();
  if (pid_ == 0) {
    close(fds[1]);
    uint16_t port = 0;
    if (read(fds[0], &port, sizeof port) != sizeof port) _exit(1);
    auto src = MakeRegion(1, bytes, seed, /*fill=*/true);
    SessionOptions opt = options;
    opt.port = port;
    auto sender = Sender::Connect(opt, {&src.region, 1});
    if (!sender.ok()) _exit(2);
    DirtyBitmap dirty(src.region.page_count());
    DirtyBitmap* bitmaps[] = {&dirty};
    for (int r = 0; rounds == 0 || r < rounds; ++r) {
      dirty.SetAll();
      if (!(*sender)->SendRound(bitmaps).ok()) _exit(3);
    }
    while (true) pause();  // idle, beating, until killed
  }
  close(fds[0]);
  fd_ = fds[1];
}

ChildSource::~ChildSource() {
  Kill();
  if (fd_ >= 0) close(fd_);
}

bool ChildSource::Connect(uint16_t port) {
  const bool told = write(fd_, &port, sizeof port) == sizeof port;
  close(fd_);
  fd_ = -1;
  return told;
}

void ChildSource::Signal(int sig) { SignalChild(pid_, sig); }

void ChildSource::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace ramferry::testing
