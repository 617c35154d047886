// rdma_queue: the work queues of one RDMA channel. Posts send chains with
// send-queue accounting (waiting for room when it is full) and, where the
// peer grants them, receive credits (waiting for one before a SEND: see
// rdma/credits.h); keeps every receive posted from its own buffers,
// returning credits for them as they are posted again; sends control
// messages (inline, or from a small pool of registered buffers), and turns
// completions into calls on a Handler: a packet's send done, a message
// received.
//
// wr_id: the kind in the top byte, a token or buffer index below.
#ifndef RAMFERRY_CHANNELS_RDMA_QUEUE_H_
#define RAMFERRY_CHANNELS_RDMA_QUEUE_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "channels/rdma/connection.h"
#include "channels/rdma/credits.h"
#include "channels/rdma/rdma.h"
#include "channels/transport.h"
#include "proto/rdma_control.h"

namespace ramferry::channels {

enum WrKind : uint64_t {
  kPacketSend = 1,  // a packet with pages (WRITEs then the header's SEND)
  kControlSend = 2,
  kRecv = 3,
  kMarkerSend = 4,  // a header-only packet (SYNC, FINISH): nothing pinned
  // A packet's page WRITE. Signalled only where it ends a part of a packet
  // too long for one post; named so a failed WRITE says what it was.
  kPageWrite = 5,
};
inline constexpr int kKindShift = 56;
inline constexpr uint64_t kValueMask = (uint64_t{1} << kKindShift) - 1;

inline uint64_t WrId(WrKind kind, uint64_t value) {
  return (uint64_t{kind} << kKindShift) | value;
}
const char* KindName(uint64_t kind);

class RdmaQueue {
 public:
  class Handler {
   public:
    virtual ~Handler() = default;
    // A packet's (or marker's) post completed: its header slot's token.
    virtual absl::Status OnPacketSent(uint32_t token, bool zero_copy) = 0;
    // Receive buffer `index` holds a message of `length` bytes; the handler
    // posts it again (PostRecv) once done with it.
    virtual absl::Status OnReceive(uint32_t index, uint32_t length) = 0;
  };

  // Registered buffers for control messages too large to go inline.
  static constexpr size_t kControlBuffers = 8;

  // Receive buffers of `recv_bytes` each, config.recv_queue of them.
  RdmaQueue(Connection* conn, const RdmaConfig& config,
            absl::Duration stall_timeout, size_t recv_bytes,
            TransportStats* stats, Handler* handler);
  ~RdmaQueue();
  RdmaQueue(const RdmaQueue&) = delete;
  RdmaQueue& operator=(const RdmaQueue&) = delete;

  // Registers the buffers it owns and posts every receive.
  absl::Status Init();

  // From any thread: waits end, posted work flushes without an error.
  void Stop() { stop_.store(true, std::memory_order_release); }
  bool stopping() const { return stop_.load(std::memory_order_acquire); }

  // Handles every completion that is ready; never blocks.
  absl::Status Progress();
  // For a caller that polls the completion channel's fd itself (the
  // listener, awaiting a proof on many connections at once): takes the
  // channel's pending event if there is one and arms it again, so the fd
  // wakes the caller at the next completion, then Progress. Never blocks.
  absl::Status ProgressArmed();
  // Waits until `ready()`, handling completions, for at most `timeout`
  // (InfiniteDuration: until the peer or a Stop ends it).
  absl::Status WaitFor(absl::FunctionRef<bool()> ready, absl::Duration timeout,
                       const char* what);
  // Completions handled so far.
  uint64_t completions() const { return completions_; }

  // Posts a chain of `wrs` work requests whose last is signalled with
  // `wr_id` and of which `sends` are SENDs (the rest WRITEs), first making
  // room in the send queue if it is full and, where credits are counted,
  // waiting for a credit per SEND. A chain longer than the queue is
  // refused: no room could ever appear for it.
  absl::Status Post(ibv_send_wr* first, uint32_t wrs, uint64_t wr_id,
                    uint32_t sends);
  // The most work requests one Post may carry.
  uint32_t send_queue() const { return send_queue_; }
  absl::Status SendControl(const proto::RdmaControl& control);
  // Sends `bytes` as one message, as SendControl sends its encoding
  // (inline where it fits, from a control buffer otherwise).
  absl::Status SendMessage(absl::Span<const uint8_t> bytes);

  absl::Status PostRecv(uint32_t index);

  // --- receive credits (kFeatureRdmaCredits) ---
  // The sending side: count SENDs against the peer's grants from now on.
  void CountCredits() { credits_ = SendCredits(true); }
  // A CREDITS message from the peer.
  absl::Status GrantCredits(uint32_t credits);
  // The receiving side: grants the peer every receive (the first CREDITS)
  // and from now on returns them as Release posts them again.
  absl::Status GrantReceiveQueue();
  // Posts receive `index` again; where credits are returned, returns them
  // to the peer once a batch has gathered.
  absl::Status Release(uint32_t index);
  const uint8_t* message(uint32_t index) const {
    return recv_buf_.data() + size_t{index} * recv_bytes_;
  }

  // What the QP granted, and the count of a send that used it.
  uint32_t max_inline() const { return conn_->max_inline; }
  void CountInline(size_t bytes);

 private:
  struct Posted {
    uint64_t wr_id;
    uint32_t wrs;
  };

  absl::Status HandleCompletion(const ibv_wc& wc);
  // A CREDITS control message granting or returning `credits` receives.
  absl::Status SendCreditsMessage(uint32_t credits);
  absl::Status Retire(uint64_t wr_id);

  Connection* const conn_;
  const uint32_t send_queue_;
  const uint32_t recv_queue_;
  const absl::Duration stall_timeout_;
  const size_t recv_bytes_;
  TransportStats* const stats_;
  Handler* const handler_;
  std::atomic<bool> stop_{false};
  std::vector<uint8_t> recv_buf_;
  std::vector<uint8_t> ctl_buf_;
  std::vector<bool> ctl_busy_;
  ibv_mr* recv_mr_ = nullptr;
  ibv_mr* ctl_mr_ = nullptr;
  std::deque<Posted> posted_;
  uint64_t outstanding_ = 0;
  SendCredits credits_;
  std::optional<CreditReturn> returns_;
  uint64_t completions_ = 0;
};

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_RDMA_QUEUE_H_
