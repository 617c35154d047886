// Hundreds of bogus connections against a real Receiver: idle ones, ones
// that send garbage, ones with a well-formed Hello but no key. Each costs
// the destination fixed handshake buffers for at most the handshake
// timeout; none gets a thread or a byte of a region; and neither a
// migration in progress nor a source arriving in the middle of the flood
// is disturbed.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/handshake.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;
using testing::LoopbackPair;
using testing::MakeRegion;
using testing::ServingReceiver;

const std::string kKey = "flood test key, thirty-two bytes";
constexpr int kFlood = 300;

// Opens and holds bogus connections to 127.0.0.1:port.
class Flood {
 public:
  enum Kind { kIdle, kGarbage, kHelloWithoutKey };

  void Open(uint16_t port, int count) {
    for (int i = 0; i < count; ++i) {
      const int fd = testing::ConnectToLoopback(port);
      if (fd < 0) continue;  // the backlog overflowed: that is a refusal too
      fds_.push_back(fd);
      uint8_t bytes[proto::kHelloBytes];
      switch (static_cast<Kind>(i % 3)) {
        case kIdle:
          break;
        case kGarbage:
          for (size_t b = 0; b < sizeof bytes; ++b) bytes[b] = uint8_t(b * 7);
          (void)!send(fd, bytes, sizeof bytes, MSG_NOSIGNAL);
          break;
        case kHelloWithoutKey: {
          proto::Hello h;
          h.session.bytes.fill(0x42);
          h.channel_count = 2;
          h.max_packet_pages = 128;
          h.transport = 1;
          proto::EncodeHello(h, absl::MakeSpan(bytes));
          (void)!send(fd, bytes, sizeof bytes, MSG_NOSIGNAL);
          break;
        }
      }
    }
  }
  ~Flood() {
    for (int fd : fds_) close(fd);
  }
  size_t size() const { return fds_.size(); }

 private:
  std::vector<int> fds_;
};

SessionOptions Keyed() {
  SessionOptions o = ::ramferry::testing::InsecureOptions();
  o.auth_key = kKey;
  o.channels = 4;
  o.handshake_timeout = absl::Seconds(5);
  return o;
}

TEST(FloodTest, MigrationInProgressIsUndisturbed) {
  LoopbackPair pair(testing::ScaledBytes(64 << 20), 31, Keyed());
  ASSERT_NE(pair.sender, nullptr);
  ASSERT_OK(pair.SendEverything());

  std::atomic<bool> flooded{false};
  Flood flood;
  std::thread attacker([&] {
    flood.Open(pair.rx->port(), kFlood);
    flooded.store(true);
  });
  // Rounds keep going while the flood arrives and sits there.
  int rounds = 0;
  while (!flooded.load() || rounds < 3) {
    // Rewrite part of the source, so each round carries new bytes.
    auto* p = static_cast<uint8_t*>(pair.src.region.base);
    p[rounds * 4096 + 7] ^= 0xFF;
    ASSERT_OK(pair.SendEverything()) << "round " << rounds;
    ++rounds;
  }
  attacker.join();
  ASSERT_OK(pair.sender->Finish());
  ASSERT_OK(pair.rx->result());
  EXPECT_TRUE(testing::SameBytes(pair.src.region, pair.dst.region));
  EXPECT_GT(flood.size(), 0u);
}

TEST(FloodTest, SourceArrivingDuringAFloodGetsIn) {
  auto src = MakeRegion(1, 8 << 20, 32, /*fill=*/true);
  auto dst = MakeRegion(1, 8 << 20);
  ServingReceiver rx(Keyed(), {dst.region});
  // Far more idle connections than the destination handshakes at once.
  Flood flood;
  flood.Open(rx.port(), kFlood);
  ASSERT_GT(flood.size(), 64u);

  SessionOptions o = Keyed();
  o.port = rx.port();
  auto sender = Sender::Connect(o, {&src.region, 1});
  ASSERT_OK(sender);
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  ASSERT_OK((*sender)->SendRound(bitmaps));
  ASSERT_OK((*sender)->Finish());
  ASSERT_OK(rx.result());
  EXPECT_TRUE(testing::SameBytes(src.region, dst.region));
  // The flood was turned away, not served.
  EXPECT_GE(rx.receiver().stats().connections_refused, flood.size() - 64);
}

TEST(FloodTest, SilentConnectionIsClosedAfterTheHandshakeTimeout) {
  auto dst = MakeRegion(1, 1 << 20);
  SessionOptions o = Keyed();
  o.handshake_timeout = absl::Milliseconds(300);
  ServingReceiver rx(o, {dst.region});
  for (size_t sent : {size_t{0}, proto::kHelloBytes / 2}) {
    Flood one;
    one.Open(rx.port(), 1);  // idle
    const int fd = testing::ConnectToLoopback(rx.port());
    ASSERT_GE(fd, 0);
    std::vector<uint8_t> part(sent, 0x52);
    if (sent > 0) {
      ASSERT_EQ(send(fd, part.data(), sent, 0), ssize_t(sent));
    }
    const absl::Time start = absl::Now();
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 5000), 1) << "still open after 5 s";
    char c;
    EXPECT_LE(recv(fd, &c, 1, 0), 0);  // closed: EOF or reset
    const absl::Duration took = absl::Now() - start;
    EXPECT_GE(took, absl::Milliseconds(250)) << sent;
    EXPECT_LT(took, absl::Seconds(3)) << sent;
    close(fd);
  }
  rx.receiver().Abort(absl::CancelledError("test over"));
  EXPECT_THAT(rx.result(),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("test over")));
}

}  // namespace
}  // namespace ramferry
