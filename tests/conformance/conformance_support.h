// Shared by the conformance tests: which transports exist and which of
// them can run on this machine, loopback transport pairs, tagged packets a
// reader checks byte for byte, the packets a round will cost, and a child
// process forked while the test process is still single-threaded.
#ifndef RAMFERRY_TESTS_CONFORMANCE_CONFORMANCE_SUPPORT_H_
#define RAMFERRY_TESTS_CONFORMANCE_CONFORMANCE_SUPPORT_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "channels/rdma/rdma.h"
#include "channels/transport.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/options.h"
#include "ramferry/region.h"
#include "ramferry/transport.h"
#include "tests/support/test_support.h"
#include "tests/support/transport_selection.h"

namespace ramferry::conformance {

// Every transport the suite covers, runnable here or not, and the zero-copy
// ones (from the family table; initialized before any test registration that
// includes this header).
inline const std::vector<TransportKind> kAllTransports =
    testing::TransportsWith(0);
inline const std::vector<TransportKind> kZeroCopyTransports =
    testing::TransportsWith(channels::kCapZeroCopy);
inline constexpr CompletionPolicy kAllPolicies[] = {
    CompletionPolicy::kWrap, CompletionPolicy::kSlot, CompletionPolicy::kEach};

using testing::RdmaHost;
using testing::TestName;
using testing::UseTransportHost;
using testing::WhyUnavailable;

// The send side of `kind` and the receive side it talks to. Socket
// transports: channels::OpenSocketChannel and the receive
// side every socket transport shares (channels::OpenTcp), on the two ends
// of a loopback TCP connection. rdma: ConnectRdma to an RdmaListener on
// RdmaHost(), one queue pair, negotiated as the engine does (on-demand
// registration with REG_BATCH, or pin-all). For rdma both ends must
// RegisterRegion every region before data moves, and the payload lands in
// the receive side's registered region (see PacketReader's `dest`).
struct RdmaPairOptions {
  bool pin_all = false;
  uint32_t max_inline = 512;  // inline room to ask the queue pairs for
  // Smaller than the engine's 1 MiB so that the capability tests' 1 MiB
  // region spans several chunks.
  uint64_t chunk_bytes = 256 << 10;
  // Receive credits (kFeatureRdmaCredits), as the engine negotiates them;
  // off, the source relies on RNR retry as an older peer does.
  bool credits = true;
  // Receives each end keeps posted: the destination's grant.
  uint32_t recv_queue = channels::RdmaConfig{}.recv_queue;
};
struct TransportPair {
  // rdma: the listener the receive side came from, kept until both ends
  // are gone (declared first: destroyed last).
  std::unique_ptr<channels::RdmaListener> rdma_listener;
  std::unique_ptr<channels::Transport> tx;
  std::unique_ptr<channels::Transport> rx;
};
absl::StatusOr<TransportPair> OpenTransportPair(
    TransportKind kind, const channels::TransportOptions& options,
    const RdmaPairOptions& rdma = {});
// capabilities() of a freshly opened send side of `kind`.
absl::StatusOr<uint32_t> CapabilitiesOf(TransportKind kind);

// The zero-copy peer: another network namespace reached through a real
// NIC, where zero-copy completions are not all copied (on loopback every
// one is, so the kernel never holds a page while a device reads it). The
// Soft-RoCE VM run with RXE_NICS=2 (tests/rdma_vm) sets ZC_PEER_NETNS (a
// namespace file, /run/netns/zcpeer) and ZC_PEER_IP (eth1's address
// there, reached from this namespace out of ZC_NETDEV, eth0, through a
// hub inside qemu). Unset anywhere else: every test then runs as before.
struct ZeroCopyPeer {
  std::string netns;   // $ZC_PEER_NETNS
  std::string ip;      // $ZC_PEER_IP
  std::string netdev;  // $ZC_NETDEV: this namespace's NIC toward the peer
  // $ZC_LINK: how qemu joins the NICs. "tap" (two taps on a host bridge:
  // the NICs have scatter-gather, so zero-copy pages reach the device as
  // they are) or "hub" (no offloads: the stack copies at transmit time).
  std::string link;
  bool real_device_reads() const { return link == "tap"; }
};
// The peer from the environment; nullopt unless both ZC_PEER_NETNS and
// ZC_PEER_IP are set.
std::optional<ZeroCopyPeer> ZeroCopyPeerFromEnv();
// Whether sessions of `kind` go to the peer: the socket zero-copy
// transports, when there is one.
bool UsesZeroCopyPeer(TransportKind kind);
// The calling thread in the peer's network namespace (setns(2), which
// moves only this thread) until destroyed, then back where it was.
// Sockets keep the namespace they were made in, and threads started
// meanwhile inherit it: construct a receiver inside one and all of its
// sockets live there. ok() false (with error()) if either setns failed.
class InNetworkNamespace {
 public:
  explicit InNetworkNamespace(const std::string& netns_path);
  ~InNetworkNamespace();
  InNetworkNamespace(const InNetworkNamespace&) = delete;
  InNetworkNamespace& operator=(const InNetworkNamespace&) = delete;
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  int home_fd_ = -1;
  std::string error_;
};
// /sys/class/net/`netdev`/statistics/`counter` (tx_bytes, rx_bytes, ...)
// of this namespace's NIC; nullopt when it cannot be read.
std::optional<uint64_t> NetdevCounter(const std::string& netdev,
                                      const std::string& counter);

// Transport-level packets: a header of kTagHeaderBytes that names the
// packet's payload runs, so the reader can check them against the source.
inline constexpr size_t kTagHeaderBytes = 64;
inline constexpr size_t kMaxRuns = 3;
struct PayloadRun {
  uint64_t offset = 0;  // in the source memory
  uint64_t length = 0;
};
// Fills the header from AcquireHeader() and sends one packet whose payload
// is `runs` of `base` (payload_offsets are the runs' offsets). With
// `header_out`, reports which header buffer the packet used.
absl::Status SendTagged(channels::Transport& tx, uint32_t tag,
                        uint32_t region_id, const uint8_t* base,
                        const std::vector<PayloadRun>& runs,
                        const uint8_t** header_out = nullptr);

// Reads `packets` tagged packets on its own thread and checks every
// payload byte against `source` (which must not change meanwhile).
// Without `dest`, payload is read into a buffer of the reader's (socket
// transports). With `dest` (rdma: the receive side's registered region,
// with the same layout as `source`), ReadPayload gets the spans of `dest`
// at the runs' offsets, as the engine's receiver passes them, and the
// check compares `dest` there: RDMA places the pages before the header
// arrives and ReadPayload reads nothing.
class PacketReader {
 public:
  // `pause`: slept after each packet (a slow destination).
  PacketReader(channels::Transport* rx, const uint8_t* source, uint32_t packets,
               uint8_t* dest = nullptr,
               absl::Duration pause = absl::ZeroDuration());
  ~PacketReader();
  // Waits (at most `timeout`, then shuts the transport down) for the
  // reader; its status.
  absl::Status Finish(absl::Duration timeout = absl::Seconds(30));
  // Tags in arrival order, and packets whose payload differed.
  const std::vector<uint32_t>& tags() const { return tags_; }
  uint32_t corrupt() const { return corrupt_; }

 private:
  absl::Status Run();
  channels::Transport* const rx_;
  const uint8_t* const source_;
  const uint32_t packets_;
  uint8_t* const dest_;
  const absl::Duration pause_;
  std::vector<uint32_t> tags_;
  uint32_t corrupt_ = 0;
  std::future<absl::Status> result_;
  bool finished_ = false;
};

// What a round of `dirty` will cost, computed before sending it the way
// the scheduler batches (dirty pages in order, packet_pages per packet)
// and the channels coalesce (adjacent pages of a packet form one run).
struct RoundPlan {
  uint64_t pages = 0;
  uint64_t packets = 0;
  uint64_t runs = 0;
};
RoundPlan PlanRound(const DirtyBitmap& dirty, uint32_t packet_pages);

// Rewrites `count` random pages of `region` with new random bytes and
// marks them in `dirty`.
void RewriteRandomPages(const Region& region, uint64_t count,
                        std::mt19937_64& rng, DirtyBitmap& dirty);

// Polls `done` until it holds or `timeout` passes; whether it held.
bool PollUntil(const std::function<bool()>& done, absl::Duration timeout);

using testing::SingleThreaded;
using testing::ThreadCount;

// Runs `body` in a forked child; its return value is the exit code, and
// what it writes to the given fd comes back as the report. Fork happens in
// the constructor: call it while the process has one thread.
class ForkedChild {
 public:
  explicit ForkedChild(const std::function<int(int report_fd)>& body);
  // A fresh process instead: fork, then exec this test binary with
  // kChildReceiverEnv=`spec`; its global test environment runs the
  // receiver (RunChildReceiver) and exits before any test. The report fd
  // stays open across the exec.
  explicit ForkedChild(const std::string& spec);
  ~ForkedChild();
  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Reads exactly `n` bytes of the report while the child runs.
  bool ReadReport(void* buf, size_t n, absl::Duration timeout);
  // Waits for the child to exit (killing it after `timeout`); its exit
  // code (-1 when killed by a signal) and report.
  struct Result {
    int exit_code = -1;
    bool timed_out = false;
    std::string report;
  };
  Result Wait(absl::Duration timeout);

 private:
  pid_t pid_ = -1;
  int report_fd_ = -1;
  bool reaped_ = false;
};

// A destination in a child process (so it can be stopped and killed),
// forked at construction: create it before any thread exists. For rdma
// the child is a fresh process (fork + exec, ForkedChild(spec)): a child
// that is only forked inherits the verbs device its parent opened
// (librdmacm keeps it open process-wide once any rdma session ran), and
// the kernel refuses that inherited uverbs file's commands in the child
// (ibv_post_send fails with EACCES), so it must open its own.
inline constexpr char kChildReceiverEnv[] =
    "RAMFERRY_CONFORMANCE_CHILD_RECEIVER";
class ChildReceiver {
 public:
  ChildReceiver(const SessionOptions& options, uint64_t bytes);
  uint16_t port() const { return port_; }
  void Signal(int sig) { child_->Signal(sig); }

 private:
  std::unique_ptr<ForkedChild> child_;
  uint16_t port_ = 0;
};

}  // namespace ramferry::conformance

#endif  // RAMFERRY_TESTS_CONFORMANCE_CONFORMANCE_SUPPORT_H_
