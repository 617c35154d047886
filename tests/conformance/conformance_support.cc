#include "tests/conformance/conformance_support.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "channels/channel_factory.h"
#include "channels/rdma/rdma.h"
#include "channels/tcp.h"
#include "channels/uring_zerocopy.h"
#include "engine/control.h"
#include "gtest/gtest.h"
#include "proto/handshake.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/test_support.h"

namespace ramferry::conformance {

using testing::TcpPair;

namespace {

// Capabilities the rdma pair's ends offer each other, as the engine's
// source offers them (OfferedCapabilities) and its destination grants.
uint64_t RdmaOffered(const RdmaPairOptions& rdma) {
  uint64_t caps = proto::kFeatureRdmaRegBatch;
  if (rdma.pin_all) caps |= proto::kFeatureRdmaPinAll;
  if (rdma.credits) caps |= proto::kFeatureRdmaCredits;
  return caps;
}

// An RdmaListener on RdmaHost(), port 0, and ConnectRdma to it; the
// listener's thread hands the accepted transport over through `handoff`.
absl::StatusOr<TransportPair> OpenRdmaPair(
    const channels::TransportOptions& options, const RdmaPairOptions& rdma) {
  const std::string host = RdmaHost();
  if (host.empty()) {
    return absl::FailedPreconditionError(
        "an rdma pair needs the RDMA device's address in RXE_IP");
  }
  struct Handoff {
    std::mutex mu;
    std::condition_variable cv;
    std::unique_ptr<channels::Transport> rx;
    int deliveries = 0;
  };
  // Shared with the listener's callback, which may outlive a failed wait.
  auto handoff = std::make_shared<Handoff>();
  const uint64_t offered = RdmaOffered(rdma);
  channels::RdmaConfig config;
  config.capabilities = offered;
  config.chunk_bytes = rdma.chunk_bytes;
  config.max_inline = rdma.max_inline;
  config.recv_queue = rdma.recv_queue;
  config.connect_timeout = absl::Seconds(10);
  // The receive side gets what the engine's destination gives its
  // channels: the header size and the stall timeout.
  channels::TransportOptions rx_options;
  rx_options.max_header_bytes = options.max_header_bytes;
  rx_options.stall_timeout = options.stall_timeout;
  absl::StatusOr<std::unique_ptr<channels::RdmaListener>> listener =
      channels::RdmaListener::Listen(
          host, 0, rx_options, config, /*key=*/"",
          [offered](const proto::Hello& h) {
            proto::HelloReply reply;
            if (h.transport != static_cast<uint16_t>(TransportKind::kRdma)) {
              reply.status =
                  static_cast<uint16_t>(absl::StatusCode::kInvalidArgument);
              reply.reason = absl::StrCat("transport ", h.transport,
                                          " on the rdma listener");
              return reply;
            }
            reply.capabilities = h.capabilities & offered;
            return reply;
          },
          [handoff](const proto::Hello&,
                    absl::StatusOr<std::unique_ptr<channels::Transport>> t) {
            std::lock_guard<std::mutex> lock(handoff->mu);
            ++handoff->deliveries;
            if (handoff->rx == nullptr && t.ok()) handoff->rx = *std::move(t);
            handoff->cv.notify_all();
          });
  if (!listener.ok()) return listener.status();

  proto::Hello hello;
  hello.role = proto::Role::kData;
  hello.session = engine::NewSessionId();
  hello.channel_index = 0;
  hello.channel_count = 1;
  hello.capabilities = offered;
  hello.max_packet_pages = 64;
  hello.transport = static_cast<uint16_t>(TransportKind::kRdma);
  hello.rdma_chunk_bytes = rdma.chunk_bytes;
  proto::HelloReply reply;
  absl::StatusOr<std::unique_ptr<channels::Transport>> tx =
      channels::ConnectRdma(host, (*listener)->port(), hello, options, config,
                            /*key=*/"", &reply);
  if (!tx.ok()) return tx.status();
  if (reply.capabilities != offered) {
    return absl::InternalError(
        absl::StrFormat("the listener granted capabilities 0x%x, offered 0x%x",
                        reply.capabilities, offered));
  }

  TransportPair pair;
  {
    // The source sees ESTABLISHED first; the listener's thread delivers
    // the destination's end when it sees it too.
    std::unique_lock<std::mutex> lock(handoff->mu);
    if (!handoff->cv.wait_for(lock, std::chrono::seconds(10),
                              [&] { return handoff->rx != nullptr; })) {
      return absl::DeadlineExceededError(
          "ConnectRdma succeeded, but the listener delivered no transport in "
          "10 s");
    }
    if (handoff->deliveries != 1) {
      return absl::InternalError(absl::StrCat(
          "the listener delivered ", handoff->deliveries, " transports"));
    }
    pair.rx = std::move(handoff->rx);
  }
  pair.rdma_listener = std::move(*listener);
  pair.tx = std::move(*tx);
  return pair;
}

}  // namespace

absl::StatusOr<TransportPair> OpenTransportPair(
    TransportKind kind, const channels::TransportOptions& options,
    const RdmaPairOptions& rdma) {
  if (kind == TransportKind::kRdma) return OpenRdmaPair(options, rdma);
  auto [send_fd, recv_fd] = TcpPair();
  if (send_fd < 0 || recv_fd < 0) {
    return absl::InternalError("no loopback TCP connection");
  }
  absl::StatusOr<std::unique_ptr<channels::Transport>> tx =
      channels::OpenSocketChannel(kind, send_fd, options);
  if (!tx.ok()) {
    close(recv_fd);
    return tx.status();
  }
  TransportPair pair;
  pair.tx = std::move(*tx);
  pair.rx = channels::OpenTcp(recv_fd, options);
  return pair;
}

absl::StatusOr<uint32_t> CapabilitiesOf(TransportKind kind) {
  channels::TransportOptions options;
  options.max_header_bytes = kTagHeaderBytes;
  RAMFERRY_ASSIGN_OR_RETURN(TransportPair pair,
                            OpenTransportPair(kind, options));
  return pair.tx->capabilities();
}

std::optional<ZeroCopyPeer> ZeroCopyPeerFromEnv() {
  const char* netns = std::getenv("ZC_PEER_NETNS");
  const char* ip = std::getenv("ZC_PEER_IP");
  if (netns == nullptr || ip == nullptr || *netns == 0 || *ip == 0) {
    return std::nullopt;
  }
  const char* netdev = std::getenv("ZC_NETDEV");
  const char* link = std::getenv("ZC_LINK");
  return ZeroCopyPeer{netns, ip, netdev != nullptr ? netdev : "",
                      link != nullptr ? link : "hub"};
}

bool UsesZeroCopyPeer(TransportKind kind) {
  return (kind == TransportKind::kTcpZeroCopy ||
          kind == TransportKind::kUringZeroCopy) &&
         ZeroCopyPeerFromEnv().has_value();
}

InNetworkNamespace::InNetworkNamespace(const std::string& netns_path) {
  home_fd_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  const int fd = open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (home_fd_ < 0 || fd < 0) {
    error_ = absl::StrCat("cannot open ", fd < 0 ? netns_path : "own netns",
                          ": ", strerror(errno));
  } else if (setns(fd, CLONE_NEWNET) != 0) {
    error_ = absl::StrCat("setns(", netns_path, "): ", strerror(errno));
  }
  if (fd >= 0) close(fd);
}

InNetworkNamespace::~InNetworkNamespace() {
  if (home_fd_ < 0) return;
  // Back home, or the thread would go on in the peer's namespace.
  if (setns(home_fd_, CLONE_NEWNET) != 0) {
    ADD_FAILURE() << "setns back to the test's own namespace: "
                  << strerror(errno);
  }
  close(home_fd_);
}

std::optional<uint64_t> NetdevCounter(const std::string& netdev,
                                      const std::string& counter) {
  std::ifstream in(
      absl::StrCat("/sys/class/net/", netdev, "/statistics/", counter));
  uint64_t v = 0;
  if (!(in >> v)) return std::nullopt;
  return v;
}

namespace {

// Header layout: u32 tag, u32 run count, then (u64 offset, u64 length)
// per run.
struct TagHeader {
  uint32_t tag;
  uint32_t runs;
  PayloadRun run[kMaxRuns];
};
static_assert(sizeof(TagHeader) <= kTagHeaderBytes);

}  // namespace

absl::Status SendTagged(channels::Transport& tx, uint32_t tag,
                        uint32_t region_id, const uint8_t* base,
                        const std::vector<PayloadRun>& runs,
                        const uint8_t** header_out) {
  if (runs.size() > kMaxRuns) return absl::InvalidArgumentError("runs");
  RAMFERRY_ASSIGN_OR_RETURN(absl::Span<uint8_t> header, tx.AcquireHeader());
  if (header.size() < kTagHeaderBytes) {
    return absl::InternalError(
        absl::StrFormat("AcquireHeader gave %d bytes, asked for %d",
                        header.size(), kTagHeaderBytes));
  }
  if (header_out != nullptr) *header_out = header.data();
  TagHeader h{};
  h.tag = tag;
  h.runs = static_cast<uint32_t>(runs.size());
  std::copy(runs.begin(), runs.end(), h.run);
  std::memset(header.data(), 0, kTagHeaderBytes);
  std::memcpy(header.data(), &h, sizeof h);
  std::vector<iovec> iov;
  std::vector<uint64_t> offsets;
  for (const PayloadRun& r : runs) {
    iov.push_back({const_cast<uint8_t*>(base + r.offset), r.length});
    offsets.push_back(r.offset);
  }
  return tx.SendPacket(
      {kTagHeaderBytes, region_id, absl::MakeConstSpan(iov), offsets});
}

PacketReader::PacketReader(channels::Transport* rx, const uint8_t* source,
                           uint32_t packets, uint8_t* dest,
                           absl::Duration pause)
    : rx_(rx), source_(source), packets_(packets), dest_(dest), pause_(pause) {
  result_ = std::async(std::launch::async, [this] { return Run(); });
}

PacketReader::~PacketReader() {
  if (!finished_) (void)Finish(absl::ZeroDuration());
}

absl::Status PacketReader::Run() {
  std::vector<uint8_t> header(kTagHeaderBytes), body;
  for (uint32_t i = 0; i < packets_; ++i) {
    if (i > 0 && pause_ > absl::ZeroDuration()) absl::SleepFor(pause_);
    RAMFERRY_RETURN_IF_ERROR(rx_->ReadExact(absl::MakeSpan(header), true));
    TagHeader h;
    std::memcpy(&h, header.data(), sizeof h);
    if (h.runs > kMaxRuns) {
      return absl::DataLossError(
          absl::StrFormat("packet %d: header says %d runs", i, h.runs));
    }
    uint64_t total = 0;
    for (uint32_t r = 0; r < h.runs; ++r) total += h.run[r].length;
    if (dest_ != nullptr) {
      // The payload is (already) in place: the destination's spans, as the
      // engine's receiver names them, then the check there.
      std::vector<iovec> spans;
      for (uint32_t r = 0; r < h.runs; ++r) {
        spans.push_back({dest_ + h.run[r].offset, h.run[r].length});
      }
      if (total > 0) {
        RAMFERRY_RETURN_IF_ERROR(rx_->ReadPayload(absl::MakeConstSpan(spans)));
      }
      tags_.push_back(h.tag);
      bool same = true;
      for (uint32_t r = 0; r < h.runs; ++r) {
        same = same &&
               std::memcmp(dest_ + h.run[r].offset, source_ + h.run[r].offset,
                           h.run[r].length) == 0;
      }
      if (!same) ++corrupt_;
      continue;
    }
    body.assign(total, 0);
    iovec v{body.data(), body.size()};
    if (total > 0) {
      RAMFERRY_RETURN_IF_ERROR(rx_->ReadPayload(absl::MakeSpan(&v, 1)));
    }
    tags_.push_back(h.tag);
    uint64_t at = 0;
    bool same = true;
    for (uint32_t r = 0; r < h.runs; ++r) {
      same = same && std::memcmp(body.data() + at, source_ + h.run[r].offset,
                                 h.run[r].length) == 0;
      at += h.run[r].length;
    }
    if (!same) ++corrupt_;
  }
  return absl::OkStatus();
}

absl::Status PacketReader::Finish(absl::Duration timeout) {
  finished_ = true;
  if (result_.wait_for(absl::ToChronoNanoseconds(timeout)) !=
      std::future_status::ready) {
    rx_->Shutdown();
    absl::Status s = result_.get();
    return absl::DeadlineExceededError(absl::StrCat(
        "reader did not finish in ", absl::FormatDuration(timeout), " (",
        tags_.size(), " of ", packets_, " packets read): ", s.ToString()));
  }
  return result_.get();
}

RoundPlan PlanRound(const DirtyBitmap& dirty, uint32_t packet_pages) {
  RoundPlan plan;
  uint64_t in_packet = 0;
  uint64_t last = 0;
  for (uint64_t p = 0; p < dirty.pages(); ++p) {
    if (!dirty.Test(p)) continue;
    if (in_packet == packet_pages) in_packet = 0;
    if (in_packet == 0) {
      ++plan.packets;
      ++plan.runs;
    } else if (p != last + 1) {
      ++plan.runs;
    }
    ++in_packet;
    ++plan.pages;
    last = p;
  }
  return plan;
}

void RewriteRandomPages(const Region& region, uint64_t count,
                        std::mt19937_64& rng, DirtyBitmap& dirty) {
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t page = rng() % region.page_count();
    auto* words = reinterpret_cast<uint64_t*>(region.page(page));
    for (uint64_t w = 0; w < region.page_size / 8; ++w) words[w] = rng();
    dirty.Set(page);
  }
}

bool PollUntil(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Microseconds(200));
  }
  return true;
}

ForkedChild::ForkedChild(const std::function<int(int)>& body) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe: " << strerror(errno);
    return;
  }
  pid_ = fork();
  if (pid_ == 0) {
    close(fds[0]);
    const int code = body(fds[1]);
    close(fds[1]);
    // No atexit handlers, no gtest teardown: the parent owns the test.
    _exit(code);
  }
  close(fds[1]);
  report_fd_ = fds[0];
  if (pid_ < 0) ADD_FAILURE() << "fork: " << strerror(errno);
}

ForkedChild::ForkedChild(const std::string& spec) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe: " << strerror(errno);
    return;
  }
  // Everything the child needs, built before fork.
  const std::string env = absl::StrCat(spec, " report_fd=", fds[1]);
  char self[] = "/proc/self/exe";
  // Environments are set up only when some test is selected: one cheap one.
  char filter[] = "--gtest_filter=TransportNames.EveryTransportParsesByName";
  char* argv[] = {self, filter, nullptr};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    // The report fd crosses the exec; gtest's chatter does not.
    int flags = fcntl(fds[1], F_GETFD);
    if (flags < 0 || fcntl(fds[1], F_SETFD, flags & ~FD_CLOEXEC) != 0) {
      _exit(126);
    }
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) dup2(null, STDOUT_FILENO);
    setenv(kChildReceiverEnv, env.c_str(), 1);
    execv(self, argv);
    _exit(127);
  }
  pid_ = pid;
  close(fds[1]);
  report_fd_ = fds[0];
  if (pid_ < 0) ADD_FAILURE() << "fork: " << strerror(errno);
}

ForkedChild::~ForkedChild() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (report_fd_ >= 0) close(report_fd_);
}

void ForkedChild::Signal(int sig) {
  if (pid_ > 0 && !reaped_) kill(pid_, sig);
}

bool ForkedChild::ReadReport(void* buf, size_t n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    pollfd pfd{report_fd_, POLLIN, 0};
    if (ms <= 0 || poll(&pfd, 1, static_cast<int>(ms)) <= 0) return false;
    ssize_t r = read(report_fd_, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

ForkedChild::Result ForkedChild::Wait(absl::Duration timeout) {
  Result result;
  if (pid_ <= 0) return result;
  const absl::Time deadline = absl::Now() + timeout;
  // The report ends when the child exits (its end of the pipe closes).
  char buf[4096];
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    pollfd pfd{report_fd_, POLLIN, 0};
    if (ms <= 0 || poll(&pfd, 1, static_cast<int>(ms)) == 0) {
      result.timed_out = true;
      kill(pid_, SIGKILL);
      break;
    }
    ssize_t r = read(report_fd_, buf, sizeof buf);
    if (r > 0) {
      result.report.append(buf, static_cast<size_t>(r));
    } else if (r == 0 || errno != EINTR) {
      break;
    }
  }
  int status = 0;
  waitpid(pid_, &status, 0);
  reaped_ = true;
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

namespace {

// The destination's side of a ChildReceiver: Receiver::Listen with
// `options`, the port reported on `report_fd`, then Serve until killed.
int ServeAsChild(const SessionOptions& options, uint64_t bytes, int report_fd) {
  testing::TestRegion dst = testing::MakeRegion(1, bytes);
  auto rx = Receiver::Listen(options, {&dst.region, 1});
  uint16_t port = rx.ok() ? (*rx)->port() : 0;
  if (write(report_fd, &port, sizeof port) != sizeof port) return 1;
  if (!rx.ok()) return 1;
  (void)(*rx)->Serve();
  return 0;
}

// The receiver's fields of SessionOptions, and the region size, as one
// line for kChildReceiverEnv (no field holds a space).
std::string ChildReceiverSpec(const SessionOptions& o, uint64_t bytes) {
  return absl::StrCat(
      "bytes=", bytes, " host=", o.host, " port=", o.port,
      " transport=", static_cast<int>(o.transport),
      " handshake_ms=", absl::ToInt64Milliseconds(o.handshake_timeout),
      " stall_ms=", absl::ToInt64Milliseconds(o.stall_timeout),
      " max_channels=", o.max_channels,
      " max_packet_pages=", o.max_packet_pages,
      " rdma_max_inline=", o.rdma_max_inline,
      " rdma_reg_batch=", o.rdma_reg_batch ? 1 : 0);
}

// In the exec'ed child: parses the spec, serves, and never returns. A bad
// spec exits 2.
[[noreturn]] void RunChildReceiver(const std::string& spec) {
  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  uint64_t bytes = 0;
  int report_fd = -1;
  std::istringstream in(spec);
  std::string field;
  while (in >> field) {
    const size_t eq = field.find('=');
    if (eq == std::string::npos) _exit(2);
    const std::string key = field.substr(0, eq);
    const std::string value = field.substr(eq + 1);
    const uint64_t n = std::strtoull(value.c_str(), nullptr, 10);
    if (key == "bytes") {
      bytes = n;
    } else if (key == "host") {
      opt.host = value;
    } else if (key == "port") {
      opt.port = static_cast<uint16_t>(n);
    } else if (key == "transport") {
      opt.transport = static_cast<TransportKind>(n);
    } else if (key == "handshake_ms") {
      opt.handshake_timeout = absl::Milliseconds(n);
    } else if (key == "stall_ms") {
      opt.stall_timeout = absl::Milliseconds(n);
    } else if (key == "max_channels") {
      opt.max_channels = static_cast<uint32_t>(n);
    } else if (key == "max_packet_pages") {
      opt.max_packet_pages = static_cast<uint32_t>(n);
    } else if (key == "rdma_max_inline") {
      opt.rdma_max_inline = static_cast<uint32_t>(n);
    } else if (key == "rdma_reg_batch") {
      opt.rdma_reg_batch = n != 0;
    } else if (key == "report_fd") {
      report_fd = static_cast<int>(n);
    } else {
      _exit(2);
    }
  }
  if (bytes == 0 || report_fd < 0) _exit(2);
  // No gtest teardown: the parent owns the test.
  _exit(ServeAsChild(opt, bytes, report_fd));
}

// Runs before any test of an exec'ed child (see ForkedChild(spec)); in a
// normal run it does nothing.
class ChildReceiverEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* spec = std::getenv(kChildReceiverEnv);
    if (spec != nullptr) RunChildReceiver(spec);
  }
};
[[maybe_unused]] ::testing::Environment* const kChildReceiverEnvironment =
    ::testing::AddGlobalTestEnvironment(new ChildReceiverEnvironment);

}  // namespace

ChildReceiver::ChildReceiver(const SessionOptions& options, uint64_t bytes) {
  SessionOptions opt = options;
  UseTransportHost(opt);  // rdma: the device's address, as the source's
  if (opt.transport == TransportKind::kRdma) {
    child_ = std::make_unique<ForkedChild>(ChildReceiverSpec(opt, bytes));
  } else {
    child_ = std::make_unique<ForkedChild>(
        [&](int report_fd) { return ServeAsChild(opt, bytes, report_fd); });
  }
  if (!child_->ReadReport(&port_, sizeof port_, absl::Seconds(30))) {
    ADD_FAILURE() << "the child receiver never reported its port";
    port_ = 0;
  }
}

}  // namespace ramferry::conformance
