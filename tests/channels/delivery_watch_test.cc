// A channel with nothing to send still learns that its link died: the
// watch fails once the bytes it sent stand still for the stall timeout
// (and never while they move, drain, or new sends follow), and every
// socket transport's Poll reports it on a real TCP connection whose peer
// takes nothing more.
#include "channels/delivery_watch.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "channels/tcp.h"
#include "channels/tcp_zerocopy.h"
#include "channels/uring_zerocopy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::channels {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;

constexpr absl::Duration kStall = absl::Seconds(2);
const absl::Time kT0 = absl::FromUnixSeconds(1000);

absl::Time At(double seconds) { return kT0 + absl::Seconds(seconds); }

TEST(DeliveryWatchTest, NothingUndeliveredNeverStalls) {
  DeliveryWatch w(kStall);
  for (int s = 0; s < 100; s += 5) EXPECT_OK(w.Look(0, 7, At(s))) << s;
}

TEST(DeliveryWatchTest, ACountThatStandsForTheStallTimeoutFails) {
  DeliveryWatch w(kStall);
  EXPECT_OK(w.Look(100, 5, At(0)));
  EXPECT_OK(w.Look(100, 5, At(1.999)));
  absl::Status s = w.Look(100, 5, At(2));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("100 bytes sent have waited 2s"));
  EXPECT_THAT(s.message(), HasSubstr("the link or the peer is down"));
}

TEST(DeliveryWatchTest, AMovingCountIsProgress) {
  DeliveryWatch w(kStall);
  EXPECT_OK(w.Look(100, 5, At(0)));
  EXPECT_OK(w.Look(90, 5, At(1.5)));
  EXPECT_OK(w.Look(90, 5, At(3.0)));  // 1.5 s since it moved
  EXPECT_THAT(w.Look(90, 5, At(3.5)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("the link or the peer is down")));
}

// A send between two looks restarts the watch even where the count came
// back to the same value (one unacknowledged SYNC at the end of each
// round): the bytes standing now are not those seen before.
TEST(DeliveryWatchTest, ASendRestartsTheWatch) {
  DeliveryWatch w(kStall);
  EXPECT_OK(w.Look(80, 5, At(0)));
  EXPECT_OK(w.Look(80, 6, At(1.9)));
  EXPECT_OK(w.Look(80, 6, At(3.8)));
  EXPECT_THAT(w.Look(80, 6, At(3.9)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("the link or the peer is down")));
}

TEST(DeliveryWatchTest, DrainingToNothingRestartsTheWatch) {
  DeliveryWatch w(kStall);
  EXPECT_OK(w.Look(100, 5, At(0)));
  EXPECT_OK(w.Look(0, 5, At(1)));
  EXPECT_OK(w.Look(100, 5, At(2.5)));
  EXPECT_OK(w.Look(100, 5, At(4.4)));
  EXPECT_THAT(w.Look(100, 5, At(4.5)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("the link or the peer is down")));
}

// A connected TCP pair on loopback; `peer` is the accepted end.
struct TcpPair {
  int local = -1;
  int peer = -1;
  TcpPair() {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(listener, 1), 0);
    EXPECT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
    local = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(local, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    peer = accept(listener, nullptr, nullptr);
    EXPECT_GE(peer, 0);
    close(listener);
  }
  ~TcpPair() {
    if (peer >= 0) close(peer);
  }
};

// Fills the connection until the kernel takes no more: the peer's
// receive buffer and then `fd`'s send queue hold bytes the peer never
// takes, and no send is blocked.
void FillUntilFull(int fd) {
  std::vector<char> chunk(64 << 10, 'x');
  while (send(fd, chunk.data(), chunk.size(), MSG_DONTWAIT | MSG_NOSIGNAL) >
         0) {
  }
}

using Opener =
    std::function<absl::StatusOr<std::unique_ptr<Transport>>(int fd)>;

struct Kind {
  std::string name;
  Opener open;
};

TransportOptions WatchOptions() {
  TransportOptions o;
  o.max_header_bytes = 4096;
  o.stall_timeout = absl::Milliseconds(400);
  return o;
}

std::vector<Kind> SocketKinds() {
  return {
      {"tcp", [](int fd) { return OpenTcp(fd, WatchOptions()); }},
      {"tcp_zerocopy",
       [](int fd) { return OpenTcpZeroCopy(fd, WatchOptions()); }},
      {"uring_zerocopy",
       [](int fd) { return OpenUringZeroCopy(fd, WatchOptions()); }},
  };
}

class SocketDeliveryTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam().name != "uring_zerocopy") return;
    if (absl::Status why = ProbeUringZeroCopy(); !why.ok()) {
      GTEST_SKIP() << why;
    }
  }
};

// Polled as an idle sender polls it, a transport whose sent bytes stand
// still reports the stall within 1.25 stall timeouts (and not before one).
TEST_P(SocketDeliveryTest, PollFailsOnceSentBytesStandStill) {
  TcpPair pair;
  FillUntilFull(pair.local);
  absl::StatusOr<std::unique_ptr<Transport>> t = GetParam().open(pair.local);
  ASSERT_OK(t);
  EXPECT_EQ((*t)->idle_poll_interval(), absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  absl::Status s;
  while ((s = (*t)->Poll()).ok() && absl::Now() - start < absl::Seconds(10)) {
    absl::SleepFor((*t)->idle_poll_interval());
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("the link or the peer is down"));
  EXPECT_GE(took, absl::Milliseconds(400));
  EXPECT_LT(took, absl::Seconds(5)) << "a stall of 400ms took this long";
}

// A peer that reads, however slowly, is never a stall.
TEST_P(SocketDeliveryTest, PollStaysQuietWhileThePeerTakesTheBytes) {
  TcpPair pair;
  FillUntilFull(pair.local);
  absl::StatusOr<std::unique_ptr<Transport>> t = GetParam().open(pair.local);
  ASSERT_OK(t);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    std::vector<char> buf(256 << 10);
    while (!done.load()) {
      absl::SleepFor(absl::Milliseconds(150));
      (void)recv(pair.peer, buf.data(), buf.size(), MSG_DONTWAIT);
    }
  });
  const absl::Time start = absl::Now();
  absl::Status s;
  while ((s = (*t)->Poll()).ok() && absl::Now() - start < absl::Seconds(1)) {
    absl::SleepFor((*t)->idle_poll_interval());
  }
  done = true;
  reader.join();
  EXPECT_OK(s);
}

INSTANTIATE_TEST_SUITE_P(Kinds, SocketDeliveryTest,
                         ::testing::ValuesIn(SocketKinds()),
                         [](const ::testing::TestParamInfo<Kind>& i) {
                           return i.param.name;
                         });

}  // namespace
}  // namespace ramferry::channels
