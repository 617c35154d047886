// FdStreamSink over real sockets: each stream's bytes reach its peer in
// order and once, whatever a resend overlaps; its end is the peer's EOF;
// a slow peer never holds a channel (Take) back; acknowledgements follow
// what the peer took; a peer that closes fails its stream through
// OnError, and a stream never opened, or a source past its window, is
// refused.
#include "engine/stream/fd_stream_sink.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::engine {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

struct SocketPair {
  SocketPair() {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  }
  ~SocketPair() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
  // Everything the peer end reads up to EOF.
  std::string ReadAll() {
    std::string out;
    char buf[4096];
    for (;;) {
      const ssize_t n = read(fds[1], buf, sizeof buf);
      if (n <= 0) return out;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  int fds[2] = {-1, -1};
};

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

proto::StreamFrame Frame(uint32_t stream, uint64_t offset,
                         const std::string& s) {
  return {.stream = stream,
          .offset = offset,
          .bytes = static_cast<uint32_t>(s.size())};
}

TEST(FdStreamSink, EachStreamReachesItsPeerOnceInOrderThenItsEnd) {
  SocketPair a, b;
  FdStreamSink sink;
  ASSERT_OK(sink.Open(0, a.fds[0]));
  ASSERT_OK(sink.Open(7, b.fds[0]));
  ASSERT_OK(sink.Take(Frame(0, 0, "QEVM"), Bytes("QEVM")));
  ASSERT_OK(sink.Take(Frame(7, 0, "multifd"), Bytes("multifd")));
  ASSERT_OK(sink.Take(Frame(0, 4, "-main"), Bytes("-main")));
  // Sent again after a lost channel, from an earlier offset.
  ASSERT_OK(sink.Take(Frame(0, 2, "VM-main-2"), Bytes("VM-main-2")));
  ASSERT_OK(sink.Take({.stream = 0, .offset = 11, .end = true}, {}));
  ASSERT_OK(sink.Take({.stream = 7, .offset = 7, .end = true}, {}));
  // The end sent again (its acknowledgement lost with a channel): dropped.
  ASSERT_OK(sink.Take({.stream = 0, .offset = 11, .end = true}, {}));
  EXPECT_EQ(a.ReadAll(), "QEVM-main-2");
  EXPECT_EQ(b.ReadAll(), "multifd");
  EXPECT_EQ(sink.delivered(0), 11u);
  EXPECT_TRUE(sink.ended(0));
  EXPECT_TRUE(sink.ended(7));
  EXPECT_FALSE(sink.ended(1));
}

// A peer that reads slowly holds the writer (the channel) back rather
// than losing or buffering without bound: 4 MiB, far more than a socket
// buffer, cannot all be taken before the peer starts to read, and arrive
// whole.
// A peer that does not read yet never blocks Take: a channel carries
// other streams, whose peers this one may wait for. What the peer takes
// later arrives whole, and is acknowledged as it goes.
TEST(FdStreamSink, ASlowPeerNeverHoldsTheChannelAndLosesNothing) {
  SocketPair p;
  std::mutex
      mu;  // std::mutex: TSan sees it (Debian's absl is not built for it)
  std::vector<std::pair<uint64_t, bool>> acks;
  FdStreamSink sink({.on_delivered =
                         [&](uint32_t stream, uint64_t delivered, bool end) {
                           std::lock_guard<std::mutex> lock(mu);
                           EXPECT_EQ(stream, 1u);
                           acks.push_back({delivered, end});
                         },
                     .ack_every = 1 << 20});
  ASSERT_OK(sink.Open(1, p.fds[0]));
  std::string sent;
  for (int i = 0; sent.size() < (4u << 20); ++i) {
    sent += std::to_string(i) + ",";
  }
  for (size_t at = 0; at < sent.size(); at += 1 << 20) {
    const std::string part = sent.substr(at, 1 << 20);
    ASSERT_OK(sink.Take(Frame(1, at, part), Bytes(part)));
  }
  ASSERT_OK(sink.Take({.stream = 1, .offset = sent.size(), .end = true}, {}));
  // All taken, while the peer has read nothing.
  EXPECT_LT(sink.delivered(1), sent.size());
  const std::string got = p.ReadAll();
  EXPECT_TRUE(got == sent);
  EXPECT_EQ(sink.delivered(1), sent.size());
  EXPECT_TRUE(sink.ended(1));
  sink.Join();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_GE(acks.size(), 4u);  // one a MiB, then the end
  EXPECT_EQ(acks.back(), std::make_pair(uint64_t{sent.size()}, true));
  for (size_t i = 1; i < acks.size(); ++i) {
    EXPECT_GT(acks[i].first, acks[i - 1].first);
  }
}

TEST(FdStreamSink, APeerThatClosedAndAStreamNeverOpenedAreErrors) {
  SocketPair p;
  std::mutex
      mu;  // std::mutex: TSan sees it (Debian's absl is not built for it)
  absl::Status failed;
  FdStreamSink sink({.on_error =
                         [&](const absl::Status& s) {
                           std::lock_guard<std::mutex> lock(mu);
                           failed = s;
                         },
                     .max_queued = 1 << 20});
  ASSERT_OK(sink.Open(3, p.fds[0]));
  EXPECT_THAT(sink.Open(3, p.fds[0]),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("stream 3 is open already")));
  EXPECT_THAT(sink.Open(proto::kMaxStreams, p.fds[0]),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("numbered below 256")));
  EXPECT_THAT(sink.Take(Frame(4, 0, "x"), Bytes("x")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("stream 4 was never opened")));
  ASSERT_OK(sink.Take(Frame(3, 0, "abc"), Bytes("abc")));
  char buf[3];
  ASSERT_EQ(read(p.fds[1], buf, sizeof buf), 3);
  close(p.fds[1]);
  p.fds[1] = -1;
  // The writer finds the peer gone, and says so; Take says it too.
  absl::Status last;
  for (int i = 0; i < 500; ++i) {
    last = sink.Take(Frame(3, 3 + 3 * i, "def"), Bytes("def"));
    if (!last.ok()) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
  const auto refused = StatusIs(
      absl::StatusCode::kUnavailable,
      HasSubstr("stream 3: its peer took 3 bytes and then refused more"));
  EXPECT_THAT(last, refused);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_THAT(failed, refused);
  }
  // What the cursor refuses is refused here too, and nothing is written;
  // so is a source that sends past its window.
  SocketPair q;
  ASSERT_OK(sink.Open(5, q.fds[0]));
  EXPECT_THAT(
      sink.Take(Frame(5, 10, "gap"), Bytes("gap")),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("leaves a gap")));
  EXPECT_EQ(sink.delivered(5), 0u);
  const std::string big((1 << 20) + 1, 'x');
  EXPECT_THAT(sink.Take(Frame(5, 0, big), Bytes(big)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("past what was acknowledged")));
  shutdown(q.fds[0], SHUT_RDWR);
  shutdown(p.fds[0], SHUT_RDWR);
}

}  // namespace
}  // namespace ramferry::engine
