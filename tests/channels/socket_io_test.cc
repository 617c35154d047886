// Short writes and partial reads on real sockets are resumed exactly where
// they stopped; failures come back as statuses that say what happened.
#include "channels/socket_io.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::channels {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct SocketPair {
  SocketPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0); }
  ~SocketPair() {
    close(fds[0]);
    close(fds[1]);
  }
  int fds[2];
};

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + i / 7);
  return v;
}

TEST(SendAll, ResumesShortWritesAcrossManySpans) {
  SocketPair p;
  int small = 4096;
  setsockopt(p.fds[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  // A short send timeout makes the kernel hand back partial counts while
  // the reader dawdles; SendAll must pick up where each call stopped.
  ASSERT_OK(SetStallTimeouts(p.fds[0], absl::Milliseconds(5)));
  const std::vector<uint8_t> data = Pattern(1 << 20);
  std::vector<iovec> iov;
  for (size_t off = 0; off < data.size();) {
    size_t len = std::min<size_t>(data.size() - off, 1000 + off % 7919);
    iov.push_back({const_cast<uint8_t*>(data.data() + off), len});
    off += len;
  }
  std::vector<uint8_t> got;
  std::thread reader([&] {
    uint8_t buf[32768];
    while (got.size() < data.size()) {
      // Slower than the 5 ms send timeout, so sends stop part-way.
      absl::SleepFor(absl::Milliseconds(10));
      ssize_t n = read(p.fds[1], buf, sizeof buf);
      if (n <= 0) break;
      got.insert(got.end(), buf, buf + n);
    }
  });
  size_t calls = 0, partial = 0, bytes = 0;
  std::atomic<bool> stop{false};
  auto on_call = [&](size_t n, bool part) {
    ++calls;
    partial += part;
    bytes += n;
  };
  auto no_buffers = [] { return absl::ResourceExhaustedError("no"); };
  absl::Status s = SendAll(p.fds[0], absl::MakeSpan(iov), 0, absl::Seconds(10),
                           stop, {on_call, no_buffers});
  reader.join();
  ASSERT_OK(s);
  EXPECT_EQ(bytes, data.size());
  EXPECT_GT(partial, 0u) << "the test did not provoke a short write";
  EXPECT_EQ(calls, partial + 1);
  EXPECT_EQ(got, data);
}

TEST(ReadAll, ResumesPartialReadsIntoScatteredSpans) {
  SocketPair p;
  ASSERT_OK(SetStallTimeouts(p.fds[1], absl::Milliseconds(5)));
  const std::vector<uint8_t> data = Pattern(1 << 20);
  std::thread writer([&] {
    for (size_t off = 0; off < data.size(); off += 50000) {
      size_t n = std::min<size_t>(50000, data.size() - off);
      ASSERT_EQ(write(p.fds[0], data.data() + off, n), static_cast<ssize_t>(n));
      absl::SleepFor(absl::Milliseconds(8));  // longer than the timeout
    }
  });
  std::vector<uint8_t> got(data.size());
  std::vector<iovec> iov;
  for (size_t off = 0; off < got.size(); off += 4096) {
    iov.push_back({got.data() + off, 4096});
  }
  std::atomic<bool> stop{false};
  size_t calls = 0;
  absl::Status s = ReadAll(p.fds[1], absl::MakeSpan(iov), kNoIdle,
                           absl::Seconds(10), stop, &calls);
  writer.join();
  ASSERT_OK(s);
  EXPECT_GT(calls, 1u);
  EXPECT_EQ(got, data);
}

TEST(ReadAll, PeerCloseMidBufferSaysHowFarItGot) {
  SocketPair p;
  ASSERT_EQ(write(p.fds[0], "abc", 3), 3);
  shutdown(p.fds[0], SHUT_WR);
  uint8_t buf[10];
  iovec v{buf, sizeof buf};
  std::atomic<bool> stop{false};
  size_t calls = 0;
  absl::Status s = ReadAll(p.fds[1], absl::MakeSpan(&v, 1), kNoIdle,
                           absl::Seconds(1), stop, &calls);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("after 3 of 10 bytes"));
}

TEST(ReadAll, StalledPeerMidBufferTimesOut) {
  SocketPair p;
  ASSERT_OK(SetStallTimeouts(p.fds[1], absl::Milliseconds(50)));
  ASSERT_EQ(write(p.fds[0], "abc", 3), 3);
  uint8_t buf[10];
  iovec v{buf, sizeof buf};
  std::atomic<bool> stop{false};
  size_t calls = 0;
  absl::Status s = ReadAll(p.fds[1], absl::MakeSpan(&v, 1), kNoIdle,
                           absl::Milliseconds(200), stop, &calls);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("stalled"));
}

// A 7-byte payload and a 3-byte header in one read, idle allowed at the
// boundary between them; `header` receives the header bytes.
absl::Status ReadPayloadThenHeader(int fd, absl::Duration stall,
                                   uint8_t (&header)[3]) {
  uint8_t payload[7];
  iovec v[2] = {{payload, sizeof payload}, {header, sizeof header}};
  std::atomic<bool> stop{false};
  size_t calls = 0;
  return ReadAll(fd, absl::MakeSpan(v), sizeof payload, stall, stop, &calls);
}

// A payload and the next header in one read: the peer may pause at the
// boundary between them for longer than the stall timeout, and may close
// there cleanly; a pause anywhere else still fails.
TEST(ReadAll, IdleAtThePacketBoundaryInsideTheBufferIsNotAStall) {
  SocketPair p;
  ASSERT_OK(SetStallTimeouts(p.fds[1], absl::Milliseconds(20)));
  std::thread writer([&] {
    ASSERT_EQ(write(p.fds[0], "payload", 7), 7);
    absl::SleepFor(absl::Milliseconds(300));  // 3x the stall bound
    ASSERT_EQ(write(p.fds[0], "HDR", 3), 3);
  });
  uint8_t header[3];
  absl::Status s =
      ReadPayloadThenHeader(p.fds[1], absl::Milliseconds(100), header);
  writer.join();
  ASSERT_OK(s);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(header), 3), "HDR");
}

TEST(ReadAll, StallBeforeTheBoundaryInsideTheBufferFails) {
  SocketPair p;
  ASSERT_OK(SetStallTimeouts(p.fds[1], absl::Milliseconds(20)));
  ASSERT_EQ(write(p.fds[0], "pay", 3), 3);  // 4 payload bytes short
  uint8_t header[3];
  absl::Status s =
      ReadPayloadThenHeader(p.fds[1], absl::Milliseconds(100), header);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("3 of 10 bytes"));
}

TEST(ReadAll, CloseAtTheBoundaryInsideTheBufferIsACleanClose) {
  SocketPair p;
  ASSERT_EQ(write(p.fds[0], "payload", 7), 7);
  shutdown(p.fds[0], SHUT_WR);
  uint8_t header[3];
  absl::Status s = ReadPayloadThenHeader(p.fds[1], absl::Seconds(1), header);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), Not(HasSubstr("mid-packet")));
}

TEST(SendAll, BrokenPipeIsUnavailableNotASignal) {
  SocketPair p;
  close(p.fds[1]);
  p.fds[1] = socket(AF_UNIX, SOCK_STREAM, 0);  // keep the destructor happy
  uint8_t byte = 1;
  iovec v{&byte, 1};
  std::atomic<bool> stop{false};
  auto on_call = [](size_t, bool) {};
  auto no_buffers = [] { return absl::OkStatus(); };
  absl::Status s = SendAll(p.fds[0], absl::MakeSpan(&v, 1), MSG_NOSIGNAL,
                           absl::Seconds(1), stop, {on_call, no_buffers});
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("sendmsg"));
}

TEST(ConsumeIov, DropsWholeAndPartialSpans) {
  uint8_t a[10], b[20], c[30];
  std::vector<iovec> iov = {{a, 10}, {b, 20}, {c, 30}};
  auto rest = ConsumeIov(absl::MakeSpan(iov), 15);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0].iov_base, b + 5);
  EXPECT_EQ(rest[0].iov_len, 15u);
  EXPECT_EQ(IovBytes(rest), 45u);
  rest = ConsumeIov(rest, 45);
  EXPECT_TRUE(rest.empty());
}

}  // namespace
}  // namespace ramferry::channels
