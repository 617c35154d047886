// The link testbed (tools/common/link_testbed.h): real connections over
// each of its links, a link taken down and brought back, a rate that holds,
// and no namespace left behind.
#include "tools/common/link_testbed.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/link_testbed_skip.h"
#include "tests/support/status_matchers.h"
#include "tests/support/subprocess.h"

namespace ramferry::cli {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;

bool NamespaceExists(const std::string& name) {
  struct stat st {};
  return stat(("/run/netns/" + name).c_str(), &st) == 0;
}

sockaddr_in Address(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  EXPECT_EQ(inet_pton(AF_INET, ip.c_str(), &a.sin_addr), 1) << ip;
  return a;
}

// A socket listening on `ip` (in the calling thread's namespace) at a
// free port: {fd, port}.
std::pair<int, uint16_t> Listen(const std::string& ip) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = Address(ip, 0);
  socklen_t len = sizeof a;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0)
      << ip << ": " << strerror(errno);
  EXPECT_EQ(listen(fd, 8), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  return {fd, ntohs(a.sin_port)};
}

// Whether `fd` becomes readable within `timeout`.
bool Readable(int fd, absl::Duration timeout) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 1;
}

// A connection to ip:port made within `timeout`, or -1.
int ConnectWithin(const std::string& ip, uint16_t port,
                  absl::Duration timeout) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in a = Address(ip, port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 &&
      errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int err = -1;
  socklen_t len = sizeof err;
  if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1 ||
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// Accepts on `listener` within 5 s; -1 if nothing came.
int AcceptWithin(int listener) {
  if (!Readable(listener, absl::Seconds(5))) return -1;
  return accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
}

TEST(LinkRateTest, ParsesTcUnits) {
  EXPECT_EQ(*ParseLinkRate("1gbit"), 1'000'000'000u);
  EXPECT_EQ(*ParseLinkRate("500mbit"), 500'000'000u);
  EXPECT_EQ(*ParseLinkRate("100kbit"), 100'000u);
  EXPECT_EQ(*ParseLinkRate("12.5mbps"), 100'000'000u);
  EXPECT_EQ(*ParseLinkRate(" 2000000bit "), 2'000'000u);
  for (const char* bad : {"1000", "fast", "0mbit", "-1gbit", "1gbitx", ""}) {
    absl::StatusOr<uint64_t> r = ParseLinkRate(bad);
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("want a positive number with a tc unit")))
        << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("1gbit")) << bad;
  }
  absl::StatusOr<std::vector<std::string>> list =
      ParseLinkRateList("1gbit, 500mbit");
  ASSERT_OK(list);
  EXPECT_EQ(*list, (std::vector<std::string>{"1gbit", "500mbit"}));
  list = ParseLinkRateList("1gbit,1gbiit");
  EXPECT_THAT(list.status().message(), HasSubstr("item 2 of '1gbit,1gbiit'"));
  EXPECT_THAT(list.status().message(), HasSubstr("'1gbiit'"));
}

TEST(LinkTestbedTest, CreateWithoutRootSaysWhatItNeeds) {
  if (geteuid() != 0) {
    absl::StatusOr<std::unique_ptr<LinkTestbed>> bed =
        LinkTestbed::Create({"1gbit"});
    EXPECT_EQ(bed.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(bed.status().message(), HasSubstr("needs root"));
    return;
  }
  // As root: the same call in a child that gave root up.
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipefd[0]);
    if (setresuid(65534, 65534, 65534) != 0) _exit(2);
    absl::StatusOr<std::unique_ptr<LinkTestbed>> bed =
        LinkTestbed::Create({"1gbit"});
    const std::string msg(bed.status().message());
    (void)!write(pipefd[1], msg.data(), msg.size());
    _exit(bed.status().code() == absl::StatusCode::kPermissionDenied ? 0 : 1);
  }
  close(pipefd[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof buf)) > 0;)
    msg.append(buf, n);
  close(pipefd[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_NE(WEXITSTATUS(status), 2) << "setresuid failed";
  EXPECT_EQ(WEXITSTATUS(status), 0) << msg;
  EXPECT_THAT(msg, HasSubstr("needs root to create network namespaces"));
  EXPECT_THAT(msg, HasSubstr("CAP_NET_ADMIN"));
}

TEST(LinkTestbedTest, ABadRateIsRefusedBeforeAnythingIsMade) {
  absl::StatusOr<std::unique_ptr<LinkTestbed>> bed =
      LinkTestbed::Create({"1gbit", "fast"});
  EXPECT_EQ(bed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bed.status().message(), HasSubstr("'fast'"));
  EXPECT_THAT(LinkTestbed::Create({}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a link testbed takes 1 to 64 links, not 0")));
}

class LinkTestbedLiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = testing::LinkTestbedSkipReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    ASSERT_OK(home_) << "cannot open this thread's network namespace";
    absl::StatusOr<std::unique_ptr<LinkTestbed>> bed =
        LinkTestbed::Create({"1gbit", "100mbit"});
    ASSERT_OK(bed);
    bed_ = std::move(*bed);
  }
  void TearDown() override {
    for (int fd : fds_) close(fd);
  }
  int Keep(int fd) {
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }
  // Declared first: destroyed last, after the testbed, so the thread is
  // back home whatever the test did.
  SavedNetworkNamespace home_;
  std::unique_ptr<LinkTestbed> bed_;
  std::vector<int> fds_;
};

TEST_F(LinkTestbedLiveTest, ConnectsFromTheSourceToEveryDestinationAddress) {
  EXPECT_EQ(bed_->links(), 2u);
  EXPECT_EQ(bed_->destination_address(1), "10.77.1.2");
  EXPECT_THAT(bed_->Describe(1),
              HasSubstr(absl::StrCat("100mbit, source ",
                                     bed_->source_namespace(), " dev veth1")));
  ASSERT_OK(bed_->EnterDestination());
  std::vector<std::pair<int, uint16_t>> listeners;
  for (size_t i = 0; i < bed_->links(); ++i) {
    listeners.push_back(Listen(bed_->destination_address(i)));
    Keep(listeners.back().first);
  }
  ASSERT_OK(bed_->EnterSource());
  for (size_t i = 0; i < bed_->links(); ++i) {
    SCOPED_TRACE(bed_->Describe(i));
    const int c = Keep(ConnectWithin(bed_->destination_address(i),
                                     listeners[i].second, absl::Seconds(5)));
    ASSERT_GE(c, 0);
    const int a = Keep(AcceptWithin(listeners[i].first));
    ASSERT_GE(a, 0);
    // The connection came from this link's source address.
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    ASSERT_EQ(getpeername(a, reinterpret_cast<sockaddr*>(&peer), &len), 0);
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &peer.sin_addr, text, sizeof text);
    EXPECT_EQ(text, bed_->source_address(i));
    ASSERT_EQ(write(c, "x", 1), 1);
    char byte = 0;
    ASSERT_TRUE(Readable(a, absl::Seconds(5)));
    ASSERT_EQ(read(a, &byte, 1), 1);
    EXPECT_EQ(byte, 'x');
  }
}

TEST_F(LinkTestbedLiveTest, NothingReachesTheCallersNamespace) {
  testing::CommandResult addrs =
      testing::RunCommand({"/usr/sbin/ip", "-o", "addr", "show"});
  ASSERT_EQ(addrs.exit_code, 0) << addrs.err;
  EXPECT_THAT(addrs.out, ::testing::Not(HasSubstr("10.77.")));
  EXPECT_TRUE(NamespaceExists(bed_->source_namespace()));
  EXPECT_TRUE(NamespaceExists(bed_->destination_namespace()));
}

TEST_F(LinkTestbedLiveTest, ALinkTakenDownCarriesNothingUntilItIsUpAgain) {
  ASSERT_OK(bed_->EnterDestination());
  auto [listener, port] = Listen(bed_->destination_address(0));
  Keep(listener);
  ASSERT_OK(bed_->EnterSource());
  const int c =
      Keep(ConnectWithin(bed_->destination_address(0), port, absl::Seconds(5)));
  ASSERT_GE(c, 0);
  const int a = Keep(AcceptWithin(listener));
  ASSERT_GE(a, 0);

  ASSERT_OK(bed_->SetLinkUp(0, false));
  ASSERT_EQ(write(c, "y", 1), 1);  // queued on the source side
  EXPECT_FALSE(Readable(a, absl::Milliseconds(500)))
      << "a byte crossed a link that is down";
  EXPECT_LT(Keep(ConnectWithin(bed_->destination_address(0), port,
                               absl::Milliseconds(500))),
            0)
      << "a connection opened over a link that is down";
  // The other link is not affected.
  ASSERT_OK(bed_->EnterDestination());
  auto [other, other_port] = Listen(bed_->destination_address(1));
  Keep(other);
  ASSERT_OK(bed_->EnterSource());
  EXPECT_GE(Keep(ConnectWithin(bed_->destination_address(1), other_port,
                               absl::Seconds(5))),
            0);

  ASSERT_OK(bed_->SetLinkUp(0, true));
  // TCP's retransmission, backed off while the link was down, delivers it.
  ASSERT_TRUE(Readable(a, absl::Seconds(15))) << "the link did not resume";
  char byte = 0;
  ASSERT_EQ(read(a, &byte, 1), 1);
  EXPECT_EQ(byte, 'y');
  EXPECT_GE(
      Keep(ConnectWithin(bed_->destination_address(0), port, absl::Seconds(5))),
      0);
}

TEST_F(LinkTestbedLiveTest, TheRateLimitHolds) {
  // 8 MB over the 100mbit link: 0.64 s at its rate, less the bucket's
  // 128 KiB burst and what the socket buffers hold before the clock
  // starts (the receiver's clock starts at its first byte).
  constexpr size_t kBytes = 8'000'000;
  ASSERT_OK(bed_->EnterDestination());
  auto [listener, port] = Listen(bed_->destination_address(1));
  Keep(listener);
  ASSERT_OK(bed_->EnterSource());
  const int c =
      Keep(ConnectWithin(bed_->destination_address(1), port, absl::Seconds(5)));
  ASSERT_GE(c, 0);
  const int a = Keep(AcceptWithin(listener));
  ASSERT_GE(a, 0);
  std::thread writer([c] {
    const std::string chunk(1 << 16, 'r');
    for (size_t sent = 0; sent < kBytes;) {
      const ssize_t n =
          write(c, chunk.data(), std::min(chunk.size(), kBytes - sent));
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  });
  std::vector<char> buf(1 << 16);
  size_t got = 0;
  absl::Time first;
  while (got < kBytes) {
    if (!Readable(a, absl::Seconds(10))) break;
    const ssize_t n = read(a, buf.data(), buf.size());
    if (n <= 0) break;
    if (got == 0) first = absl::Now();
    got += static_cast<size_t>(n);
  }
  const absl::Duration took = absl::Now() - first;
  writer.join();
  ASSERT_EQ(got, kBytes);
  EXPECT_GE(took, absl::Milliseconds(450)) << "faster than 100mbit";
  EXPECT_LE(took, absl::Seconds(8)) << "far slower than 100mbit";
}

TEST(LinkTestbedCleanupTest, NoNamespaceOutlivesItsTestbedOrItsProcess) {
  if (std::string why = testing::LinkTestbedSkipReason(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  // A testbed of a process that died before its destructor ran: a child
  // that has exited, so its pid runs nothing.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  const std::string left = absl::StrCat("rf-", child, "-0-src");
  testing::CommandResult add =
      testing::RunCommand({"/usr/sbin/ip", "netns", "add", left});
  ASSERT_EQ(add.exit_code, 0) << add.err;

  std::string src, dst;
  {
    absl::StatusOr<std::unique_ptr<LinkTestbed>> bed =
        LinkTestbed::Create({"1gbit"});
    ASSERT_OK(bed);
    src = (*bed)->source_namespace();
    dst = (*bed)->destination_namespace();
    EXPECT_TRUE(NamespaceExists(src));
    EXPECT_TRUE(NamespaceExists(dst));
    EXPECT_FALSE(NamespaceExists(left)) << "a dead process's namespace stayed";
  }
  EXPECT_FALSE(NamespaceExists(src));
  EXPECT_FALSE(NamespaceExists(dst));
  if (NamespaceExists(left)) {
    testing::RunCommand({"/usr/sbin/ip", "netns", "del", left});
  }
}

}  // namespace
}  // namespace ramferry::cli
