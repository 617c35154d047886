// Real faults on loopback, for tcp, tcp-zerocopy and uring-zc: the source
// or the destination process SIGKILLed at a random point of a multi-round
// transfer, and connections reset (RST) by a relay between the two ends.
// In each case the surviving end (both ends, for a reset) must end with an
// error that says where and why, within a bound and without a hang, and
// the rounds the source believes confirmed must be the rounds the
// destination really holds.
//
// Every page carries a stamp of (page, version): round 0 writes version 0
// of every page, round r a new version r of a quarter of the pages. From
// the destination's memory alone a test can then tell which rounds are
// fully there (a killed destination's memory is a shared mapping the
// test still holds). Each case is a single (transport, seed) so that it
// runs in its own process and forks while it has one thread.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "channels/transport.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/transport_selection.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using testing::ServingReceiver;
using testing::SingleThreaded;
using testing::WhyUnavailable;

constexpr uint64_t kPageSize = 4096;
constexpr uint64_t kPages = 2048;  // 8 MiB
constexpr uint64_t kBytes = kPages * kPageSize;
constexpr int kRounds = 8;
constexpr absl::Duration kStall = absl::Seconds(2);
// From the fault to the surviving end's error: the stall timeout (a peer
// that vanished without a word) plus the root-cause grace, with margin.
constexpr absl::Duration kEndBound = absl::Seconds(6);

// --- Stamped pages ----------------------------------------------------

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Round r >= 1 rewrites the pages this picks: a scattered quarter.
bool InRound(uint64_t page, int round) {
  return round == 0 || Mix(page * 31 + round) % 4 == 0;
}

void StampPage(uint8_t* base, uint64_t page, int version) {
  auto* w = reinterpret_cast<uint64_t*>(base + page * kPageSize);
  w[0] = (page << 16) | (static_cast<uint64_t>(version) + 1);
  for (uint64_t i = 1; i < kPageSize / 8; ++i) {
    w[i] = Mix((page << 24) ^ (static_cast<uint64_t>(version) << 12) ^ i);
  }
}

// Writes round `round`'s versions into the source and marks them dirty.
void StampRound(uint8_t* base, int round, DirtyBitmap& dirty) {
  for (uint64_t p = 0; p < kPages; ++p) {
    if (!InRound(p, round)) continue;
    StampPage(base, p, round);
    dirty.Set(p);
  }
}

// The version a destination page holds: -1 if never written, -2 if its
// bytes are no version of this page at all.
int PageVersion(const uint8_t* base, uint64_t page) {
  const auto* w = reinterpret_cast<const uint64_t*>(base + page * kPageSize);
  if (w[0] == 0) {
    for (uint64_t i = 1; i < kPageSize / 8; ++i) {
      if (w[i] != 0) return -2;
    }
    return -1;
  }
  if ((w[0] >> 16) != page || (w[0] & 0xffff) == 0) return -2;
  const int version = static_cast<int>(w[0] & 0xffff) - 1;
  for (uint64_t i = 1; i < kPageSize / 8; ++i) {
    if (w[i] != Mix((page << 24) ^ (static_cast<uint64_t>(version) << 12) ^ i))
      return -2;
  }
  return version;
}

// Rounds fully present at the destination: the largest k such that, for
// every round r < k, each page of r holds version r or a later version of
// that page. A page that is no whole version (a session that died mid-
// packet leaves the page being written torn: payload lands in place) only
// counts where a later round rewrites it, as that round's write in
// progress.
int RoundsPresent(const uint8_t* base) {
  std::vector<int> version(kPages);
  for (uint64_t p = 0; p < kPages; ++p) version[p] = PageVersion(base, p);
  for (int r = 0; r < kRounds; ++r) {
    for (uint64_t p = 0; p < kPages; ++p) {
      if (!InRound(p, r) || version[p] >= r) continue;
      if (version[p] == -2) {
        bool rewritten_later = false;
        for (int later = r + 1; later < kRounds; ++later) {
          rewritten_later |= InRound(p, later);
        }
        if (rewritten_later) continue;
      }
      return r;
    }
  }
  return kRounds;
}

// Memory a forked child shares with the test (MAP_SHARED): the test reads
// a killed destination's pages after its death.
struct SharedRegion {
  SharedRegion() {
    void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    base = static_cast<uint8_t*>(p);
    region = Region{1, "ram", base, kBytes, kPageSize};
  }
  ~SharedRegion() { munmap(base, kBytes); }
  uint8_t* base;
  Region region;
};

// --- Sessions ----------------------------------------------------------

SessionOptions Options(TransportKind kind) {
  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  opt.transport = kind;
  opt.channels = 2;
  opt.packet_pages = 32;
  opt.header_slots = 16;
  opt.stall_timeout = kStall;
  opt.round_timeout = absl::Seconds(10);
  opt.connect_timeout = absl::Seconds(5);
  opt.handshake_timeout = absl::Seconds(5);
  return opt;
}

// Data packets the source sends in the whole session.
uint64_t SessionPackets(uint32_t packet_pages) {
  uint64_t packets = 0;
  for (int r = 0; r < kRounds; ++r) {
    uint64_t pages = 0;
    for (uint64_t p = 0; p < kPages; ++p) pages += InRound(p, r);
    packets += (pages + packet_pages - 1) / packet_pages;
  }
  return packets;
}

// Runs every round, then Verify and Finish, on an open sender; each
// confirmed round is reported to `on_round(rounds confirmed)`. The first
// error, or OK.
template <typename OnRound>
absl::Status RunRounds(Sender& sender, uint8_t* src, OnRound on_round) {
  for (int r = 0; r < kRounds; ++r) {
    DirtyBitmap dirty(kPages);
    StampRound(src, r, dirty);
    DirtyBitmap* bitmaps[] = {&dirty};
    RAMFERRY_RETURN_IF_ERROR(sender.SendRound(bitmaps).status());
    on_round(r + 1);
  }
  RAMFERRY_ASSIGN_OR_RETURN(VerifyReport v, sender.Verify());
  if (!v.ok()) return absl::DataLossError("verify found mismatches");
  return sender.Finish();
}

// Kills `pid` once `progress()` reaches `target`, after a further random
// delay: a random point of the transfer, whatever the machine's speed.
class Killer {
 public:
  template <typename Progress>
  Killer(pid_t pid, uint64_t target, absl::Duration extra, Progress progress)
      : thread_([this, pid, target, extra, progress] {
          while (progress() < target && !stop_.load()) {
            absl::SleepFor(absl::Microseconds(20));
          }
          if (stop_.load()) return;
          absl::SleepFor(extra);
          killed_at_ = absl::Now();
          kill(pid, SIGKILL);
          killed_.store(true);
        }) {}
  ~Killer() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  // Gives up if the target was never reached.
  void Stop() { stop_.store(true); }
  bool killed() const { return killed_.load(); }
  absl::Time killed_at() const { return killed_at_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<bool> killed_{false};
  absl::Time killed_at_;
  std::thread thread_;
};

// Reaps `pid`; whether SIGKILL ended it.
bool DiedOfSigkill(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return false;
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

using Param = std::tuple<TransportKind, int>;  // transport, seed

class LoopbackKill : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (std::string why = WhyUnavailable(kind()); !why.empty()) {
      GTEST_SKIP() << why;
    }
    ASSERT_TRUE(SingleThreaded()) << "fork needs a single-threaded process";
  }
  TransportKind kind() const { return std::get<0>(GetParam()); }
  int seed() const { return std::get<1>(GetParam()); }
  // A random data packet of the session, and a random delay after it.
  std::pair<uint64_t, absl::Duration> KillPoint() {
    std::mt19937_64 rng(seed());
    const uint64_t packets = SessionPackets(Options(kind()).packet_pages);
    const uint64_t target = 1 + rng() % (packets * 9 / 10);
    return {target, absl::Microseconds(rng() % 2000)};
  }
};

TEST_P(LoopbackKill, DestinationKilledAtARandomPoint) {
  SessionOptions opt = Options(kind());
  SharedRegion dst;  // outlives the child: its memory after the kill
  int port_pipe[2];
  ASSERT_EQ(pipe(port_pipe), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(port_pipe[0]);
    auto rx = Receiver::Listen(opt, {&dst.region, 1});
    uint16_t port = rx.ok() ? (*rx)->port() : 0;
    (void)!write(port_pipe[1], &port, sizeof port);
    close(port_pipe[1]);
    _exit(rx.ok() && (*rx)->Serve().ok() ? 0 : 1);
  }
  close(port_pipe[1]);
  uint16_t port = 0;
  ASSERT_EQ(read(port_pipe[0], &port, sizeof port),
            static_cast<ssize_t>(sizeof port));
  close(port_pipe[0]);
  ASSERT_NE(port, 0);

  testing::TestRegion src = testing::MakeRegion(1, kBytes);
  opt.port = port;
  auto sender = Sender::Connect(opt, {&src.region, 1});
  if (!sender.ok()) kill(pid, SIGKILL);
  ASSERT_OK(sender);
  auto [target, extra] = KillPoint();
  absl::Status result;
  {
    Killer killer(pid, target, extra,
                  [&] { return (*sender)->stats().Total().packets; });
    result = RunRounds(**sender, src.memory->data(), [](int) {});
    killer.Stop();
    killer.Join();
    const uint64_t confirmed = (*sender)->confirmed_rounds();
    std::printf("KILL dest %s seed=%d target=%d: killed=%d confirmed=%d %s\n",
                std::string(TransportKindName(kind())).c_str(), seed(),
                static_cast<int>(target), killer.killed(),
                static_cast<int>(confirmed), result.ToString().c_str());
    ASSERT_TRUE(killer.killed()) << "the session ended before the kill point";
    ASSERT_TRUE(DiedOfSigkill(pid));
    if (result.ok()) {
      // Killed after the destination acknowledged FINISH: a complete
      // session, byte for byte.
      EXPECT_EQ(confirmed, static_cast<uint64_t>(kRounds));
      EXPECT_EQ(std::memcmp(src.memory->data(), dst.base, kBytes), 0);
      return;
    }
    EXPECT_LE(absl::Now() - killer.killed_at(), kEndBound) << result;
    const std::string m(result.message());
    EXPECT_THAT(m,
                AnyOf(HasSubstr("channel"), HasSubstr("control connection")));
    EXPECT_THAT(m, HasSubstr(absl::StrFormat("[destination confirmed %d round",
                                             confirmed)));
    // Every round the source counts as confirmed is at the destination;
    // at most the round in flight arrived without its confirmation.
    const int present = RoundsPresent(dst.base);
    EXPECT_GE(present, static_cast<int>(confirmed));
    EXPECT_LE(present, static_cast<int>(confirmed) + 1);
  }
  // The session is over for good, for the kill's reason.
  EXPECT_THAT((*sender)->Finish(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("[destination confirmed")));
}

TEST_P(LoopbackKill, SourceKilledAtARandomPoint) {
  SessionOptions opt = Options(kind());
  // The source reports each round it saw confirmed, one byte per round.
  int port_pipe[2], report_pipe[2];
  ASSERT_EQ(pipe(port_pipe), 0);
  ASSERT_EQ(pipe(report_pipe), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(port_pipe[1]);
    close(report_pipe[0]);
    uint16_t port = 0;
    if (read(port_pipe[0], &port, sizeof port) != sizeof port) _exit(3);
    testing::TestRegion src = testing::MakeRegion(1, kBytes);
    opt.port = port;
    auto sender = Sender::Connect(opt, {&src.region, 1});
    if (!sender.ok()) _exit(3);
    absl::Status s = RunRounds(**sender, src.memory->data(), [&](int n) {
      const uint8_t b = static_cast<uint8_t>(n);
      (void)!write(report_pipe[1], &b, 1);
    });
    _exit(s.ok() ? 0 : 2);
  }
  close(port_pipe[0]);
  close(report_pipe[1]);
  testing::TestRegion dst = testing::MakeRegion(1, kBytes);
  ServingReceiver rx(opt, {dst.region});
  const uint16_t port = rx.port();
  ASSERT_EQ(write(port_pipe[1], &port, sizeof port),
            static_cast<ssize_t>(sizeof port));
  close(port_pipe[1]);

  auto [target, extra] = KillPoint();
  Killer killer(pid, target, extra,
                [&] { return rx.receiver().stats().Total().packets; });
  const absl::Status result = rx.result();
  killer.Stop();
  killer.Join();
  const bool sigkilled = DiedOfSigkill(pid);
  int reported = 0;  // rounds the source had seen confirmed
  uint8_t b;
  while (read(report_pipe[0], &b, 1) == 1) reported = b;
  close(report_pipe[0]);
  const uint64_t applied = rx.receiver().applied_rounds();
  std::printf(
      "KILL source %s seed=%d target=%d: killed=%d reported=%d "
      "applied=%d %s\n",
      std::string(TransportKindName(kind())).c_str(), seed(),
      static_cast<int>(target), killer.killed(), reported,
      static_cast<int>(applied), result.ToString().c_str());
  ASSERT_TRUE(killer.killed()) << "the session ended before the kill point";
  ASSERT_TRUE(sigkilled);
  if (result.ok()) {
    // Killed after it finished: a complete session.
    EXPECT_EQ(applied, static_cast<uint64_t>(kRounds));
    EXPECT_EQ(RoundsPresent(dst.memory->data()), kRounds);
    return;
  }
  EXPECT_LE(absl::Now() - killer.killed_at(), kEndBound) << result;
  EXPECT_TRUE(absl::IsUnavailable(result)) << result;
  EXPECT_THAT(std::string(result.message()),
              AnyOf(HasSubstr("channel"),
                    HasSubstr("control connection to the source")));
  // What the source last knew is what the destination confirmed, but for
  // a confirmation that crossed the kill; the rounds confirmed are there.
  EXPECT_GE(applied, static_cast<uint64_t>(reported));
  EXPECT_LE(applied, static_cast<uint64_t>(reported) + 1);
  const int present = RoundsPresent(dst.memory->data());
  EXPECT_GE(present, static_cast<int>(applied));
  EXPECT_LE(present, static_cast<int>(applied) + 1);
}

// The transports whose connections this test can kill and reset: the
// ones on a socket the engine holds.
const std::vector<TransportKind> kSocketTransports =
    testing::TransportsWith(0, channels::kCapOwnsConnection);

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return absl::StrCat(testing::TestName(std::get<0>(info.param)), "_seed",
                      std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    Transports, LoopbackKill,
    ::testing::Combine(::testing::ValuesIn(kSocketTransports),
                       ::testing::Values(1, 2, 3, 4)),
    ParamName);

// --- Connection reset ----------------------------------------------------

// A loopback TCP relay between the source and the destination. Once armed,
// when the bytes it has relayed on the target connection(s) reach a count,
// it closes both sockets of each with SO_LINGER{1,0}, so each end gets a
// RST. Connections are numbered in accept order: 0 is the control
// connection, then data channel 0, 1, ... (the source opens them in turn).
class ResetRelay {
 public:
  static constexpr int kAll = -1;

  explicit ResetRelay(uint16_t upstream) : upstream_(upstream) {
    std::tie(listen_fd_, port_) = testing::ListenOnLoopback(16);
    thread_ = std::thread([this] { Run(); });
  }
  ~ResetRelay() {
    stop_.store(true);
    thread_.join();
    for (Link& l : links_) {
      if (l.fd[0] >= 0) close(l.fd[0]);
      if (l.fd[1] >= 0) close(l.fd[1]);
    }
    close(listen_fd_);
  }
  uint16_t port() const { return port_; }
  // From now on, resets `target` (or all, kAll) after `bytes` more bytes
  // relayed on it (either direction; for kAll, on all connections).
  void Arm(int target, uint64_t bytes) {
    target_.store(target);
    armed_at_.store(relayed_.load());
    reset_after_.store(bytes);
    armed_.store(true);
  }
  bool reset() const { return reset_.load(); }
  absl::Time reset_at() const { return absl::FromUnixNanos(reset_ns_.load()); }

 private:
  // Both directions of one connection: fd[0] the source's side, fd[1] the
  // destination's; buf[i] holds bytes read from fd[i] not yet written.
  struct Link {
    int fd[2] = {-1, -1};
    std::vector<uint8_t> buf[2];
    bool eof[2] = {false, false};  // fd[i] sent its FIN
    uint64_t relayed = 0;
    bool dead = false;
  };

  static void Abort(int fd) {
    linger l{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
  }

  void ResetLink(Link& l) {
    for (int& fd : l.fd) {
      if (fd >= 0) Abort(fd);
      fd = -1;
    }
    l.dead = true;
  }

  void Accept() {
    int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) return;
    const int u = testing::ConnectToLoopback(upstream_);
    if (u < 0) {
      close(c);
      return;
    }
    fcntl(u, F_SETFL, fcntl(u, F_GETFL) | O_NONBLOCK);
    Link l;
    l.fd[0] = c;
    l.fd[1] = u;
    links_.push_back(std::move(l));
  }

  // Whether the armed count is reached for link `i`.
  bool Due(size_t i) const {
    if (!arm_seen_ || reset_.load()) return false;
    const int target = target_.load();
    if (target == kAll) {
      return relayed_.load() - armed_at_.load() >= reset_after_.load();
    }
    return static_cast<size_t>(target) == i && i < link_armed_at_.size() &&
           links_[i].relayed - link_armed_at_[i] >= reset_after_.load();
  }

  void Run() {
    constexpr size_t kMaxBuf = 256 << 10;
    uint8_t chunk[64 << 10];
    while (!stop_.load()) {
      // Where each link stood when the relay was armed (links accepted
      // later start from 0).
      if (!arm_seen_ && armed_.load()) {
        for (const Link& l : links_) link_armed_at_.push_back(l.relayed);
        arm_seen_ = true;
      }
      while (arm_seen_ && link_armed_at_.size() < links_.size()) {
        link_armed_at_.push_back(0);
      }
      std::vector<pollfd> p;
      std::vector<std::pair<size_t, int>> who;  // link, side
      p.push_back({listen_fd_, POLLIN, 0});
      who.push_back({0, -1});
      for (size_t i = 0; i < links_.size(); ++i) {
        Link& l = links_[i];
        if (l.dead) continue;
        for (int s = 0; s < 2; ++s) {
          short ev = 0;
          if (!l.eof[s] && l.buf[s].size() < kMaxBuf) ev |= POLLIN;
          if (!l.buf[1 - s].empty()) ev |= POLLOUT;
          p.push_back({l.fd[s], ev, 0});
          who.push_back({i, s});
        }
      }
      if (poll(p.data(), p.size(), 20) <= 0) continue;
      if (p[0].revents & POLLIN) Accept();
      for (size_t k = 1; k < p.size(); ++k) {
        auto [i, s] = who[k];
        Link& l = links_[i];
        if (l.dead) continue;
        if (p[k].revents & POLLOUT) {
          std::vector<uint8_t>& out = l.buf[1 - s];
          ssize_t n = send(l.fd[s], out.data(), out.size(), MSG_NOSIGNAL);
          if (n > 0) out.erase(out.begin(), out.begin() + n);
        }
        if (p[k].revents & (POLLIN | POLLHUP | POLLERR)) {
          size_t room = kMaxBuf - l.buf[s].size();
          ssize_t n = read(l.fd[s], chunk, std::min(room, sizeof chunk));
          if (n > 0) {
            l.buf[s].insert(l.buf[s].end(), chunk, chunk + n);
            l.relayed += n;
            relayed_.fetch_add(n);
          } else if (n == 0) {
            l.eof[s] = true;
          } else if (errno != EAGAIN && errno != EINTR) {
            ResetLink(l);  // a reset: carry it across
            continue;
          }
        }
        // A FIN crosses once the bytes before it have.
        for (int e = 0; e < 2; ++e) {
          if (l.eof[e] && l.buf[e].empty() && l.fd[1 - e] >= 0) {
            shutdown(l.fd[1 - e], SHUT_WR);
          }
        }
        if (l.eof[0] && l.eof[1] && l.buf[0].empty() && l.buf[1].empty()) {
          close(l.fd[0]);
          close(l.fd[1]);
          l.fd[0] = l.fd[1] = -1;
          l.dead = true;
          continue;
        }
        if (Due(i)) {
          // Published first: both ends may fail, and the test look, before
          // this thread gets past the resets.
          reset_ns_.store(absl::ToUnixNanos(absl::Now()));
          reset_.store(true);
          const int target = target_.load();
          for (size_t j = 0; j < links_.size(); ++j) {
            if (target == kAll || static_cast<size_t>(target) == j) {
              ResetLink(links_[j]);
            }
          }
        }
      }
    }
  }

  const uint16_t upstream_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  // Relay thread only.
  std::vector<Link> links_;
  std::vector<uint64_t> link_armed_at_;
  bool arm_seen_ = false;
  // Shared with the test thread.
  std::atomic<bool> armed_{false}, reset_{false};
  std::atomic<int> target_{0};
  std::atomic<uint64_t> reset_after_{0}, armed_at_{0}, relayed_{0};
  std::atomic<int64_t> reset_ns_{0};
};

// transport, which connection to reset (ResetRelay numbering), seed.
using ResetParam = std::tuple<TransportKind, int, int>;

class LoopbackReset : public ::testing::TestWithParam<ResetParam> {};

TEST_P(LoopbackReset, BothEndsEndWithAClearError) {
  const auto [kind, target, seed] = GetParam();
  if (std::string why = WhyUnavailable(kind); !why.empty()) {
    GTEST_SKIP() << why;
  }
  SessionOptions opt = Options(kind);
  testing::TestRegion src = testing::MakeRegion(1, kBytes);
  testing::TestRegion dst = testing::MakeRegion(1, kBytes);
  ServingReceiver rx(opt, {dst.region});
  ResetRelay relay(rx.port());
  opt.port = relay.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);

  // A random byte count the session surely relays on the target: each
  // data channel carries about half of the 22 MiB the rounds send; the
  // control connection a RoundDone (24 bytes) per round.
  std::mt19937_64 rng(seed);
  const uint64_t bytes =
      target == 0 ? 1 + rng() % (24 * (kRounds - 1)) : 1 + rng() % (8 << 20);
  relay.Arm(target, bytes);
  const absl::Status source =
      RunRounds(**sender, src.memory->data(), [](int) {});
  const absl::Time source_end = absl::Now();
  const absl::Status dest = rx.result();
  const absl::Time dest_end = absl::Now();
  const uint64_t confirmed = (*sender)->confirmed_rounds();
  const uint64_t applied = rx.receiver().applied_rounds();
  std::printf(
      "RESET %s target=%d bytes=%d: confirmed=%d applied=%d\n"
      "  source: %s\n  dest:   %s\n",
      std::string(TransportKindName(kind)).c_str(), target,
      static_cast<int>(bytes), static_cast<int>(confirmed),
      static_cast<int>(applied), source.ToString().c_str(),
      dest.ToString().c_str());
  ASSERT_TRUE(relay.reset()) << "the session ended before the reset point";
  // Both ends lost a connection, the reset one or the control connection
  // it took down, and say which.
  const auto where = AnyOf(HasSubstr("channel"), HasSubstr("control"));
  ASSERT_THAT(source, StatusIs(absl::StatusCode::kUnavailable, where));
  ASSERT_THAT(dest, StatusIs(absl::StatusCode::kUnavailable, where));
  EXPECT_LE(source_end - relay.reset_at(), kEndBound);
  EXPECT_LE(dest_end - relay.reset_at(), kEndBound);
  const std::string sm(source.message()), dm(dest.message());
  // The cause: a reset (the end that read it says so, and the other end
  // hears it from that one) or the connection it took down.
  EXPECT_THAT(sm + dm, AnyOf(HasSubstr("reset"), HasSubstr("lost the control "
                                                           "connection")));
  EXPECT_THAT(sm, HasSubstr(absl::StrFormat("[destination confirmed %d round",
                                            confirmed)));
  // Both ends in one process: the source's count is exactly the
  // destination's, but for a RoundDone the reset destroyed on its way
  // (the control connection reset); and those rounds are there.
  if (target == 0 || target == ResetRelay::kAll) {
    EXPECT_LE(confirmed, applied);
    EXPECT_GE(confirmed + 1, applied);
  } else {
    EXPECT_EQ(confirmed, applied);
  }
  const int present = RoundsPresent(dst.memory->data());
  EXPECT_GE(present, static_cast<int>(confirmed));
  EXPECT_LE(present, static_cast<int>(confirmed) + 1);
}

std::string ResetName(const ::testing::TestParamInfo<ResetParam>& info) {
  const std::string name = testing::TestName(std::get<0>(info.param));
  const int target = std::get<1>(info.param);
  const std::string what = target == ResetRelay::kAll ? "all"
                           : target == 0              ? "control"
                                         : absl::StrCat("channel", target - 1);
  return absl::StrCat(name, "_", what, "_seed", std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    Transports, LoopbackReset,
    ::testing::Combine(::testing::ValuesIn(kSocketTransports),
                       ::testing::Values(0, 1, 2, ResetRelay::kAll),
                       ::testing::Values(1, 2, 3)),
    ResetName);

}  // namespace
}  // namespace ramferry
