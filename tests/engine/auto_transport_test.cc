// --transport=auto: the choice and its reason, for every kind of peer this
// machine can present. (A peer behind a physical NIC needs a second
// machine; that branch is exercised where one exists.)
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/transport.h"
#include "tests/support/status_matchers.h"
#include "tests/support/subprocess.h"

namespace ramferry {
namespace {

using ::testing::HasSubstr;
using testing::RunCommand;

TEST(ChooseTransport, LoopbackPeerGetsCopyingTcp) {
  for (const char* host : {"127.0.0.1", "::1", "localhost"}) {
    absl::StatusOr<TransportChoice> c = ChooseTransport(host);
    ASSERT_OK(c) << host;
    EXPECT_EQ(c->kind, TransportKind::kTcp) << host;
    EXPECT_THAT(c->reason, HasSubstr("on this host")) << host;
    EXPECT_THAT(c->reason, HasSubstr("copies every zero-copy payload"));
  }
}

TEST(ChooseTransport, UnresolvableHostIsAnError) {
  absl::StatusOr<TransportChoice> c = ChooseTransport("no.such.host.invalid");
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
}

TEST(ChooseTransport, PeerBehindAVethInAnotherNamespaceGetsTcp) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create a namespace";
  const std::string ns = absl::StrCat("rfat-", getpid());
  const std::string a = absl::StrCat("rfa", getpid() % 10000);
  const std::string b = absl::StrCat("rfb", getpid() % 10000);
  const char* ip = "/usr/sbin/ip";
  if (RunCommand({ip, "netns", "add", ns}).exit_code != 0) {
    GTEST_SKIP() << "cannot create a network namespace";
  }
  RunCommand({ip, "link", "add", a, "type", "veth", "peer", "name", b});
  RunCommand({ip, "link", "set", b, "netns", ns});
  RunCommand({ip, "addr", "add", "10.213.7.1/24", "dev", a});
  RunCommand({ip, "link", "set", a, "up"});
  RunCommand({ip, "-n", ns, "addr", "add", "10.213.7.2/24", "dev", b});
  RunCommand({ip, "-n", ns, "link", "set", b, "up"});
  absl::StatusOr<TransportChoice> c = ChooseTransport("10.213.7.2");
  RunCommand({ip, "netns", "del", ns});
  RunCommand({ip, "link", "del", a});
  ASSERT_OK(c);
  EXPECT_EQ(c->kind, TransportKind::kTcp);
  EXPECT_THAT(c->reason, HasSubstr(a));
  EXPECT_THAT(c->reason, HasSubstr("virtual interface"));
}

}  // namespace
}  // namespace ramferry
