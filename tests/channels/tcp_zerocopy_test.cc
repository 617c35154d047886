// The zero-copy transport against the real kernel on loopback: one send
// call per packet, every MSG_ZEROCOPY send completed after Flush, the
// policy's flushes where the policy says, and headers intact at the far end
// although their slots were reused many times.
#include "channels/tcp_zerocopy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "channels/socket_io.h"
#include "channels/tcp.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry::channels {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

using testing::TcpPair;

constexpr uint32_t kSlots = 4;
constexpr uint32_t kPackets = 100;
constexpr size_t kHeader = 64;
constexpr size_t kPayload = 64 << 10;

class TcpZeroCopyTest : public ::testing::TestWithParam<CompletionPolicy> {};

TEST_P(TcpZeroCopyTest, OneSendPerPacketAndEveryCompletionReaped) {
  auto [send_fd, recv_fd] = TcpPair();
  TransportOptions opt;
  opt.max_header_bytes = kHeader;
  opt.header_slots = kSlots;
  opt.completion = GetParam();
  ASSERT_OK(SetStallTimeouts(send_fd, absl::Seconds(10)));
  absl::StatusOr<std::unique_ptr<Transport>> tx = OpenTcpZeroCopy(send_fd, opt);
  ASSERT_OK(tx);
  std::unique_ptr<Transport> rx = OpenTcp(recv_fd, opt);

  std::vector<uint8_t> payload(kPayload);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = i * 7;
  std::vector<uint32_t> seen;
  std::thread reader([&] {
    std::vector<uint8_t> header(kHeader), body(kPayload);
    for (uint32_t i = 0; i < kPackets; ++i) {
      if (!rx->ReadExact(absl::MakeSpan(header), true).ok()) return;
      iovec v{body.data(), body.size()};
      if (!rx->ReadPayload(absl::MakeSpan(&v, 1)).ok()) return;
      uint32_t tag;
      std::memcpy(&tag, header.data(), sizeof tag);
      seen.push_back(tag);
      if (body != payload) seen.push_back(~0u);
    }
  });
  for (uint32_t i = 0; i < kPackets; ++i) {
    absl::StatusOr<absl::Span<uint8_t>> h = (*tx)->AcquireHeader();
    ASSERT_OK(h);
    std::memset(h->data(), 0, kHeader);
    std::memcpy(h->data(), &i, sizeof i);
    iovec v{payload.data(), payload.size()};
    uint64_t off = 0;
    ASSERT_OK((*tx)->SendPacket(
        {kHeader, 0, absl::MakeSpan(&v, 1), absl::MakeSpan(&off, 1)}));
  }
  ASSERT_OK((*tx)->Flush());
  reader.join();

  std::vector<uint32_t> want(kPackets);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(seen, want) << "a header was rewritten while in flight";

  const TransportStats& s = (*tx)->stats();
  EXPECT_EQ(s.short_sends.get(), 0u);
  EXPECT_EQ(s.send_calls.get(), kPackets);
  EXPECT_EQ(s.zc_sends.get(), kPackets);
  EXPECT_EQ(s.zc_completions.get(), kPackets);
  // Loopback delivers by copying, and the kernel says so for each send.
  EXPECT_EQ(s.zc_copied.get(), s.zc_completions.get());
  EXPECT_GE(s.zc_notifications.get(), 1u);
  EXPECT_LE(s.max_slots_in_flight.get(), kSlots);
  const uint64_t explicit_flush = 1;
  switch (GetParam()) {
    case CompletionPolicy::kWrap:
      EXPECT_EQ(s.flushes.get(), kPackets / kSlots + explicit_flush);
      break;
    case CompletionPolicy::kEach:
      EXPECT_EQ(s.flushes.get(), kPackets + explicit_flush);
      EXPECT_EQ(s.max_slots_in_flight.get(), 1u);
      break;
    case CompletionPolicy::kSlot:
      EXPECT_EQ(s.flushes.get(), explicit_flush);
      break;
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, TcpZeroCopyTest,
                         ::testing::Values(CompletionPolicy::kWrap,
                                           CompletionPolicy::kSlot,
                                           CompletionPolicy::kEach),
                         [](const auto& info) {
                           return std::string(CompletionPolicyName(info.param));
                         });

TEST(TcpZeroCopy, PeerGoneWhileAwaitingCompletionsIsAnError) {
  auto [send_fd, recv_fd] = TcpPair();
  TransportOptions opt;
  opt.max_header_bytes = kHeader;
  opt.header_slots = 2;
  opt.stall_timeout = absl::Seconds(5);
  ASSERT_OK(SetStallTimeouts(send_fd, opt.stall_timeout));
  auto tx = OpenTcpZeroCopy(send_fd, opt);
  ASSERT_OK(tx);
  close(recv_fd);
  std::vector<uint8_t> payload(kPayload);
  absl::Status s;
  for (int i = 0; i < 50 && s.ok(); ++i) {
    auto h = (*tx)->AcquireHeader();
    if (!h.ok()) {
      s = h.status();
      break;
    }
    iovec v{payload.data(), payload.size()};
    uint64_t off = 0;
    s = (*tx)->SendPacket(
        {kHeader, 0, absl::MakeSpan(&v, 1), absl::MakeSpan(&off, 1)});
  }
  if (s.ok()) s = (*tx)->Flush();
  EXPECT_THAT(
      s, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("Broken pipe")));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
}

}  // namespace
}  // namespace ramferry::channels
