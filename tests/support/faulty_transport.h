// Fault injection for tests: a channels::Transport decorator that passes
// every call to the real transport it wraps, except one, chosen by a plan,
// where it injects a fault: an error, a short write or read, a delay, or a
// shutdown or reset of the real connection underneath. Everything else
// stays real (real sockets on loopback, real io_uring).
//
//   FaultInjector faults({.source = true, .op = FaultOp::kSendPacket,
//                         .nth = 5, .kind = FaultKind::kError});
//   ... Receiver::Listen / Sender::Connect: every data channel either side
//   ... opens from now on is wrapped, until `faults` is destroyed.
//   EXPECT_TRUE(faults.fired());
//
// Calls are counted per side and per operation across all of that side's
// channels, so "the 5th SendPacket of the source" is deterministic even
// though which channel makes it is not.
#ifndef RAMFERRY_TESTS_SUPPORT_FAULTY_TRANSPORT_H_
#define RAMFERRY_TESTS_SUPPORT_FAULTY_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "channels/transport.h"
#include "engine/transport_decorator.h"

namespace ramferry::testing {

// The Transport calls a fault can target.
enum class FaultOp : int {
  kAcquireHeader,
  kSendPacket,
  kSubmit,
  kFlush,
  kPoll,
  kReadExact,
  kReadPayload,
};
inline constexpr int kFaultOps = 7;

enum class FaultKind : int {
  // The call fails (INTERNAL, "injected fault ...") without reaching the
  // real transport.
  kError,
  // Send: the first half of the packet's bytes go out through the real
  // transport, then the call fails. Read: the first half of the bytes are
  // read, then the call fails.
  kShortThenFail,
  // Send only: the packet goes out in two pieces, as when the kernel takes
  // a stream in parts, and the call succeeds. Benign: the session must
  // complete. Byte streams only (not rdma, where a packet is a message).
  kShortContinue,
  // Sleeps `delay`, then makes the call. Benign when under the stall
  // timeout.
  kDelay,
  // shutdown(SHUT_RDWR) of the real connection (the peer sees EOF), then
  // the call proceeds on it. rdma (no socket to cut): the transport's own
  // Shutdown(), the nearest it has.
  kShutdown,
  // Aborts the real connection with a RST (connect(AF_UNSPEC) on the
  // socket: the kernel sends a reset, as SO_LINGER{1,0} + close would,
  // but the descriptor stays the transport's), then the call proceeds.
  // rdma: the transport's own Shutdown().
  kReset,
};

absl::string_view FaultOpName(FaultOp op);
absl::string_view FaultKindName(FaultKind kind);
// Whether the session is expected to complete despite the fault.
bool IsBenign(FaultKind kind);

struct FaultPlan {
  bool source = true;  // the Sender's channels, or the Receiver's
  FaultOp op = FaultOp::kSendPacket;
  uint64_t nth = 1;  // 1-based, counted across the side's channels
  FaultKind kind = FaultKind::kError;
  absl::Duration delay = absl::Milliseconds(200);  // kDelay
  // How many distinct channels to fault: the nth call's, then, from the
  // calls after it, the first one on each channel not faulted yet.
  uint32_t channels = 1;
};
std::string FaultPlanName(const FaultPlan& plan);

// Installs itself as the engine's transport decorator for its lifetime
// (process-wide; one at a time). Must outlive every session opened while
// installed: the wrapped transports report to it.
class FaultInjector {
 public:
  explicit FaultInjector(const FaultPlan& plan);
  ~FaultInjector();
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  const FaultPlan& plan() const { return plan_; }
  bool fired() const { return fired_.load(std::memory_order_acquire); }
  // Valid once fired().
  uint32_t fired_channel() const { return fired_channel_.load(); }
  // Every channel faulted so far, in order.
  std::vector<uint32_t> fired_channels() const;
  // The call to fault first, from now on (1-based, counted from the start
  // like plan().nth): lets a test aim at a call after what it has seen.
  void ArmAt(uint64_t nth) { nth_.store(nth); }
  uint64_t nth() const { return nth_.load(); }
  absl::Time fired_at() const;
  // Calls of `op` made so far on one side.
  uint64_t calls(bool source, FaultOp op) const;
  // Shutdown() calls made so far on one side's transports (never faulted:
  // what a test checks a teardown by).
  uint64_t shutdowns(bool source) const { return shutdowns_[source].load(); }
  void CountShutdown(bool source) { shutdowns_[source].fetch_add(1); }

  // Counts one call; true when it is the call to fault (on the thread
  // making it).
  bool Count(bool source, FaultOp op, uint32_t channel);

 private:
  std::unique_ptr<channels::Transport> Wrap(
      std::unique_ptr<channels::Transport> inner,
      const engine::TransportSite& site);

  const FaultPlan plan_;
  std::atomic<uint64_t> nth_;
  mutable std::mutex mu_;
  std::vector<uint32_t> faulted_;  // guarded by mu_
  std::atomic<uint64_t> calls_[2][kFaultOps] = {};
  std::atomic<uint64_t> shutdowns_[2] = {};
  std::atomic<bool> fired_{false};
  std::atomic<uint32_t> fired_channel_{0};
  std::atomic<int64_t> fired_at_ns_{0};
};

}  // namespace ramferry::testing

#endif  // RAMFERRY_TESTS_SUPPORT_FAULTY_TRANSPORT_H_
