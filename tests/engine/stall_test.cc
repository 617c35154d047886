// A stopped peer (SIGSTOP: its kernel keeps the connections open and
// ACKs) against an idle one. Heartbeats on the control connection tell
// them apart: an idle peer keeps the session alive for as long as it
// likes, a stopped one ends it on both sides within the stall timeout, and
// the source still knows the last round the destination confirmed.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/test_support.h"

namespace ramferry {
namespace {

using ::testing::HasSubstr;
using testing::LoopbackPair;
using testing::MakeRegion;
using testing::ServingReceiver;

constexpr uint64_t kBytes = 8 << 20;
constexpr absl::Duration kStall = absl::Seconds(1);
// The stall timeout and room for a slow (sanitizer) build to notice.
constexpr absl::Duration kNoticeBound = absl::Seconds(5);

SessionOptions Options() {
  SessionOptions o;
  o.channels = 2;
  o.stall_timeout = kStall;
  return o;
}

// A destination in a child process that reports how its session ended.
class ChildDestination {
 public:
  explicit ChildDestination(const SessionOptions& opt) {
    int to_parent[2];
    EXPECT_EQ(pipe(to_parent), 0);
    pid_ = fork();
    if (pid_ == 0) {
      close(to_parent[0]);
      auto dst = MakeRegion(1, kBytes);
      auto rx = Receiver::Listen(opt, {&dst.region, 1});
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
  ~ChildDestination() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    close(fd_);
  }
  uint16_t port() const { return port_; }
  // Returns once a SIGSTOP has taken effect (kill only queues it), so the
  // child cannot still answer the round that follows.
  void Signal(int sig) {
    kill(pid_, sig);
    if (sig == SIGSTOP) {
      int status = 0;
      waitpid(pid_, &status, WUNTRACED);
    }
  }
  // How Serve() ended, as Status::ToString(); "" if the child said nothing
  // before exiting or the timeout.
  std::string AwaitResult(absl::Duration timeout) {
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

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  uint16_t port_ = 0;
};

TEST(StallTest, IdleSourceKeepsTheSessionAlive) {
  LoopbackPair pair(kBytes, 21, Options());
  ASSERT_NE(pair.sender, nullptr);
  ASSERT_TRUE(pair.SendEverything().ok());
  // Four stall timeouts with nothing to send: only heartbeats flow.
  absl::SleepFor(4 * kStall);
  EXPECT_FALSE(pair.rx->done()) << pair.rx->result();
  ASSERT_TRUE(pair.SendEverything().ok());
  ASSERT_TRUE(pair.sender->Finish().ok());
  EXPECT_TRUE(pair.rx->result().ok());
  EXPECT_TRUE(testing::SameBytes(pair.src.region, pair.dst.region));
}

TEST(StallTest, StoppedDestinationBetweenRoundsEndsBothSides) {
  SessionOptions opt = Options();
  ChildDestination child(opt);
  opt.port = child.port();
  auto src = MakeRegion(1, kBytes, 22, /*fill=*/true);
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_TRUE(sender.ok()) << sender.status();
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  ASSERT_TRUE((*sender)->SendRound(bitmaps).ok());

  child.Signal(SIGSTOP);
  // A round small enough for the socket buffers: no send blocks, so only
  // the missing heartbeats can tell the source its peer is gone (the
  // round timeout is ten minutes).
  dirty.SetRange(0, 8);
  const absl::Time start = absl::Now();
  absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
  ASSERT_FALSE(r.ok());
  EXPECT_LT(absl::Now() - start, kNoticeBound);
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("destination stalled"));
  EXPECT_THAT(r.status().message(), HasSubstr("confirmed 1 round"));
  EXPECT_EQ((*sender)->confirmed_rounds(), 1u);

  // Woken up, the destination finds its source gone and says so.
  child.Signal(SIGCONT);
  const std::string said = child.AwaitResult(kNoticeBound);
  EXPECT_FALSE(said.empty());
  EXPECT_THAT(said, ::testing::Not(HasSubstr("OK")));
}

TEST(StallTest, StoppedSourceEndsTheDestination) {
  SessionOptions opt = Options();
  // Fork while this process has one thread; the child learns the port.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[1]);
    uint16_t port = 0;
    if (read(fds[0], &port, sizeof port) != sizeof port) _exit(1);
    opt.port = port;
    auto src = MakeRegion(1, kBytes, 23, /*fill=*/true);
    auto sender = Sender::Connect(opt, {&src.region, 1});
    if (!sender.ok()) _exit(1);
    DirtyBitmap dirty(src.region.page_count());
    dirty.SetAll();
    DirtyBitmap* bitmaps[] = {&dirty};
    if (!(*sender)->SendRound(bitmaps).ok()) _exit(2);
    pause();  // idle, beating, until stopped and killed
    _exit(0);
  }
  close(fds[0]);
  auto dst = MakeRegion(1, kBytes);
  ServingReceiver rx(opt, {dst.region});
  const uint16_t port = rx.port();
  ASSERT_EQ(write(fds[1], &port, sizeof port),
            static_cast<ssize_t>(sizeof port));
  close(fds[1]);
  while (rx.receiver().applied_rounds() < 1) {
    absl::SleepFor(absl::Milliseconds(1));
    ASSERT_FALSE(rx.done()) << rx.result();
  }
  // Idle but alive: no stall.
  absl::SleepFor(2 * kStall);
  EXPECT_FALSE(rx.done()) << rx.result();

  kill(pid, SIGSTOP);
  const absl::Time stopped = absl::Now();
  absl::Status s = rx.result();
  EXPECT_LT(absl::Now() - stopped, kNoticeBound);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("source stalled"));
  EXPECT_EQ(rx.receiver().applied_rounds(), 1u);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace
}  // namespace ramferry
