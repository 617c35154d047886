// Sessions that carry byte streams (SessionOptions::streams), end to end on
// loopback over every socket transport: each stream's bytes arrive whole
// and in order both ways, its end reaches the other side, streams open in
// the order they were carried, and a peer that refuses, a peer that cannot
// be reached and a wrong key each end the session on both ends with the
// reason. The peers are socket pairs, each end driven by a thread of the
// test, as QEMU's migration connections would be.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "channels/transport.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/faulty_transport.h"
#include "tests/support/status_matchers.h"
#include "tests/support/transport_selection.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kKey = "stream-session-test-key-0123456789";

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  std::mt19937 rng(seed);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

std::pair<int, int> SocketPair() {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return {fds[0], fds[1]};
}

// Writes all of `bytes` on `fd`, then ends its sending side.
void WriteAndEnd(int fd, const std::vector<uint8_t>& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
}

// Everything `fd` delivers until its end (or an error).
std::vector<uint8_t> ReadToEnd(int fd) {
  std::vector<uint8_t> out;
  uint8_t buffer[65536];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) return out;
    out.insert(out.end(), buffer, buffer + n);
  }
}

// One stream's peers: the source QEMU's connection (the test's end of it)
// and the destination QEMU's (the test's end, once connected).
struct StreamCase {
  std::vector<uint8_t> forward;  // the source's peer sends it
  std::vector<uint8_t> back;     // the destination's peer sends it back
};

class StreamSessionTest : public ::testing::TestWithParam<TransportKind> {
 protected:
  void SetUp() override {
    if (std::string why = testing::WhyUnavailable(GetParam()); !why.empty()) {
      GTEST_SKIP() << why;
    }
  }

  SessionOptions Options() const {
    SessionOptions o;
    o.streams = true;
    o.auth_key = kKey;  // sealed by default
    o.transport = GetParam();
    o.channels = 2;
    o.stall_timeout = absl::Seconds(20);
    return o;
  }

  // The destination: listens, and connects each stream's peer to a
  // socket pair whose other end a thread reads to its end, then answers
  // with the case's back bytes. `refuse`: the peer closes at once.
  enum class PeerKind { kReads, kRefuses, kSilent };
  void StartDestination(const SessionOptions& o,
                        const std::vector<StreamCase>& cases,
                        PeerKind kind = PeerKind::kReads) {
    auto rx = Receiver::Listen(o, {});
    ASSERT_TRUE(rx.ok()) << rx.status();
    rx_ = std::move(*rx);
    received_.resize(cases.size());
    rx_->OnStreamOpen([this, cases, kind](uint32_t s) -> absl::StatusOr<int> {
      std::lock_guard<std::mutex> lock(mu_);
      opened_.push_back(s);
      if (s >= cases.size()) return absl::NotFoundError("no such peer");
      auto [mine, theirs] = SocketPair();
      if (kind == PeerKind::kRefuses) {
        close(mine);
        return theirs;
      }
      if (kind == PeerKind::kSilent) {  // reads nothing, closes nothing
        silent_.push_back(mine);
        return theirs;
      }
      peers_.emplace_back([this, s, mine = mine, back = cases[s].back] {
        received_[s] = ReadToEnd(mine);
        WriteAndEnd(mine, back);
        close(mine);
      });
      return theirs;
    });
    serve_ = std::async(std::launch::async, [this] { return rx_->Serve(); });
  }

  // Carries each case's stream in order; a thread per stream plays its
  // source peer, and keeps what comes back.
  absl::Status CarryAll(Sender& sender, const std::vector<StreamCase>& cases) {
    returned_.resize(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      auto [mine, carried] = SocketPair();
      absl::StatusOr<uint32_t> id = sender.CarryStream(carried);
      if (!id.ok()) {
        close(mine);
        return id.status();
      }
      EXPECT_EQ(*id, i);
      sources_.emplace_back([this, i, mine = mine, fwd = cases[i].forward] {
        std::thread writer([&] { WriteAndEnd(mine, fwd); });
        returned_[i] = ReadToEnd(mine);
        writer.join();
        close(mine);
      });
    }
    return absl::OkStatus();
  }

  // Connects a source to the destination StartDestination made and
  // carries `cases` (fatal where either fails).
  void ConnectAndCarry(const SessionOptions& o,
                       const std::vector<StreamCase>& cases,
                       std::unique_ptr<Sender>* sender) {
    SessionOptions so = o;
    so.port = rx_->port();
    absl::StatusOr<std::unique_ptr<Sender>> s = Sender::Connect(so, {});
    ASSERT_TRUE(s.ok()) << s.status();
    *sender = *std::move(s);
    ASSERT_TRUE(CarryAll(**sender, cases).ok());
  }

  // Every stream ends both ways, the session finishes, and the
  // destination serves it to its end.
  void FinishWhole(Sender& sender) {
    const absl::StatusOr<bool> ended =
        sender.AwaitStreams(absl::Now() + absl::Seconds(60));
    ASSERT_TRUE(ended.ok() && *ended) << ended.status();
    ASSERT_TRUE(sender.Finish().ok());
    EXPECT_TRUE(serve_.get().ok());
    JoinPeers();
  }

  void JoinPeers() {
    for (std::thread& t : sources_) t.join();
    sources_.clear();
    std::lock_guard<std::mutex> lock(mu_);
    for (std::thread& t : peers_) t.join();
    peers_.clear();
  }

  void TearDown() override {
    if (rx_ != nullptr) rx_->Abort(absl::CancelledError("test over"));
    if (serve_.valid()) serve_.wait();
    JoinPeers();
    for (int fd : silent_) close(fd);
  }

  std::unique_ptr<Receiver> rx_;
  std::future<absl::Status> serve_;
  std::mutex mu_;
  std::vector<uint32_t> opened_;    // guarded by mu_
  std::vector<std::thread> peers_;  // guarded by mu_
  std::vector<std::thread> sources_;
  std::vector<int> silent_;  // guarded by mu_
  std::vector<std::vector<uint8_t>> received_, returned_;
};

TEST_P(StreamSessionTest, StreamsArriveWholeAndInOrderBothWays) {
  // More streams than channels; a long one, one off any packet size, an
  // empty one; the way back carries bytes on one of them.
  const std::vector<StreamCase> cases = {
      {RandomBytes(9 << 20, 1), RandomBytes(100 << 10, 2)},
      {RandomBytes((3 << 20) + 17, 3), {}},
      {{}, {}},
  };
  const SessionOptions o = Options();
  ASSERT_NO_FATAL_FAILURE(StartDestination(o, cases));
  std::unique_ptr<Sender> sender;
  ASSERT_NO_FATAL_FAILURE(ConnectAndCarry(o, cases, &sender));
  ASSERT_NO_FATAL_FAILURE(FinishWhole(*sender));
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_TRUE(received_[i] == cases[i].forward) << "stream " << i;
    EXPECT_TRUE(returned_[i] == cases[i].back) << "stream " << i;
  }
  EXPECT_THAT(opened_, ElementsAre(0, 1, 2));
  const SessionStats s = sender->stats();
  ASSERT_EQ(s.streams.size(), 3u);
  EXPECT_EQ(s.streams[0].forward_bytes, cases[0].forward.size());
  EXPECT_EQ(s.streams[0].sent_bytes, cases[0].forward.size());
  EXPECT_EQ(s.streams[0].back_bytes, cases[0].back.size());
  EXPECT_EQ(s.streams[2].channel, 0u);
  EXPECT_TRUE(s.streams[2].forward_ended && s.streams[2].back_ended);
  const SessionStats d = rx_->stats();
  ASSERT_EQ(d.streams.size(), 3u);
  EXPECT_EQ(d.streams[1].forward_bytes, cases[1].forward.size());
  EXPECT_EQ(d.streams[0].back_bytes, cases[0].back.size());
  // Every stream byte went sealed.
  EXPECT_GE(s.Total().sealed_bytes,
            cases[0].forward.size() + cases[1].forward.size());
}

TEST_P(StreamSessionTest, ARefusingPeerEndsTheSessionOnBothEnds) {
  const std::vector<StreamCase> cases = {{RandomBytes(4 << 20, 5), {}}};
  const SessionOptions o = Options();
  ASSERT_NO_FATAL_FAILURE(StartDestination(o, cases, PeerKind::kRefuses));
  std::unique_ptr<Sender> sender;
  ASSERT_NO_FATAL_FAILURE(ConnectAndCarry(o, cases, &sender));
  const absl::Status waited =
      sender->AwaitStreams(absl::Now() + absl::Seconds(60)).status();
  const absl::Status served = serve_.get();
  EXPECT_THAT(served,
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("stream 0"), HasSubstr("refused"))));
  EXPECT_FALSE(waited.ok());
  EXPECT_THAT(waited.message(), HasSubstr("stream 0"));
  EXPECT_FALSE(sender->Finish().ok());
  // The source's peer sees its connection end, not a hang.
  JoinPeers();
}

// A destination peer that neither reads nor closes (a QEMU wedged on its
// incoming side) holds its stream for the stall timeout, then fails it:
// the session ends on both ends, never held forever.
TEST_P(StreamSessionTest, APeerThatStopsReadingFailsAfterTheStallTimeout) {
  const std::vector<StreamCase> cases = {{RandomBytes(16 << 20, 6), {}}};
  SessionOptions o = Options();
  o.stall_timeout = absl::Seconds(2);
  ASSERT_NO_FATAL_FAILURE(StartDestination(o, cases, PeerKind::kSilent));
  std::unique_ptr<Sender> sender;
  ASSERT_NO_FATAL_FAILURE(ConnectAndCarry(o, cases, &sender));
  // Whichever end notices first says so: the destination's write that
  // waits (its stream), or a source whose sends the kernel never took.
  const auto stalled = StatusIs(
      absl::StatusCode::kDeadlineExceeded,
      AnyOf(HasSubstr("stall"), HasSubstr("no zero-copy completion for 2s")));
  EXPECT_THAT(serve_.get(), stalled);
  // A failure, whatever its code, is never taken for "not yet".
  const absl::StatusOr<bool> waited =
      sender->AwaitStreams(absl::Now() + absl::Seconds(30));
  EXPECT_THAT(waited.status(), stalled);
  JoinPeers();
}

TEST_P(StreamSessionTest, APeerTheDestinationCannotReachFailsTheOpening) {
  const SessionOptions o = Options();
  ASSERT_NO_FATAL_FAILURE(StartDestination(o, {}));  // every open fails
  SessionOptions so = o;
  so.port = rx_->port();
  auto sender = Sender::Connect(so, {});
  ASSERT_TRUE(sender.ok()) << sender.status();
  auto [mine, carried] = SocketPair();
  const absl::StatusOr<uint32_t> id = (*sender)->CarryStream(carried);
  EXPECT_THAT(id.status(), StatusIs(absl::StatusCode::kNotFound,
                                    AllOf(HasSubstr("stream 0"),
                                          HasSubstr("no such peer"))));
  EXPECT_THAT(serve_.get(), StatusIs(absl::StatusCode::kNotFound));
  // The carried connection is closed: the peer reads its end.
  EXPECT_TRUE(ReadToEnd(mine).empty());
  close(mine);
}

TEST_P(StreamSessionTest, AWrongKeyIsRefusedBeforeAnyPeerIsConnected) {
  const SessionOptions o = Options();
  ASSERT_NO_FATAL_FAILURE(StartDestination(o, {{RandomBytes(1000, 7), {}}}));
  SessionOptions so = o;
  so.port = rx_->port();
  so.auth_key = "another-key-0123456789abcdef-0123";
  so.connect_timeout = absl::Seconds(5);
  auto sender = Sender::Connect(so, {});
  EXPECT_FALSE(sender.ok());
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_TRUE(opened_.empty());
}

// Surviving channel loss: a channel reset mid-stream, at the source (a
// send) or at the destination (a read). Its streams move to a live
// channel and go again from what the destination acknowledged; the
// destination drops what it delivered already; every byte arrives once.
TEST_P(StreamSessionTest, AStreamGoesOnAfterItsChannelIsLost) {
  for (const bool at_source : {true, false}) {
    SCOPED_TRACE(at_source ? "reset at the source"
                           : "reset at the destination");
    testing::FaultInjector faults({.source = at_source,
                                   .op = at_source
                                             ? testing::FaultOp::kSendPacket
                                             : testing::FaultOp::kReadPayload,
                                   .nth = 12,
                                   .kind = testing::FaultKind::kReset});
    const std::vector<StreamCase> cases = {
        {RandomBytes(12 << 20, 11), RandomBytes(3000, 12)},
        {RandomBytes(9 << 20, 13), {}},
        {RandomBytes(5 << 20, 14), {}},
    };
    SessionOptions o = Options();
    o.channels = 3;
    o.survive_channel_loss = true;
    ASSERT_NO_FATAL_FAILURE(StartDestination(o, cases));
    std::unique_ptr<Sender> sender;
    ASSERT_NO_FATAL_FAILURE(ConnectAndCarry(o, cases, &sender));
    ASSERT_NO_FATAL_FAILURE(FinishWhole(*sender));
    EXPECT_TRUE(faults.fired());
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_TRUE(received_[i] == cases[i].forward) << "stream " << i;
      EXPECT_TRUE(returned_[i] == cases[i].back) << "stream " << i;
    }
    const SessionStats st = sender->stats();
    EXPECT_EQ(st.channels_lost.size(), 1u);
    for (const StreamStats& t : st.streams) {
      EXPECT_FALSE(st.channels_lost.empty() &&
                   t.channel == st.channels_lost[0].channel)
          << "stream " << t.stream << " still on the lost channel";
    }
    rx_.reset();
    serve_ = {};
    received_.clear();
    returned_.clear();
    opened_.clear();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Transports, StreamSessionTest,
    ::testing::ValuesIn(testing::TransportsWith(
        0, channels::kCapRemotePlacement | channels::kCapOwnsConnection)),
    [](const ::testing::TestParamInfo<TransportKind>& info) {
      return testing::TestName(info.param);
    });

TEST(StreamSessionOptions, AStreamSessionTakesNoRegionsAndNoRdma) {
  SessionOptions o;
  o.streams = true;
  o.insecure = true;
  alignas(4096) static uint8_t page[4096] = {};
  Region r;
  r.id = 1;
  r.base = page;
  r.length = sizeof page;
  EXPECT_THAT(ValidateSession(o, {&r, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("streams or pages, not both")));
  EXPECT_TRUE(ValidateSession(o, {}).ok());
  o.transport = TransportKind::kRdma;
  EXPECT_THAT(ValidateSession(o, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("use tcp, tcp-zerocopy or uring-zc")));
  o.transport = TransportKind::kTcp;
  o.postcopy = true;
  EXPECT_THAT(ValidateSession(o, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("streams = true with postcopy")));
  o.postcopy = false;
  o.streams = false;
  // A page session with none is refused where it starts.
  EXPECT_THAT(
      Sender::Connect(o, {}).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no regions")));
}

}  // namespace
}  // namespace ramferry
