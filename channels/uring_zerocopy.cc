#include "channels/uring_zerocopy.h"

#include <errno.h>
#include <liburing.h>
#include <sys/socket.h>
#include <unistd.h>

#include <deque>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "channels/header_slots.h"
#include "channels/socket_io.h"
#include "channels/socket_transport.h"

namespace ramferry::channels {
namespace {

// Linux 6.2 ABI; liburing 2.3's headers predate it.
constexpr uint16_t kReportUsage = 1u << 3;   // IORING_SEND_ZC_REPORT_USAGE
constexpr uint32_t kNotifCopied = 1u << 31;  // IORING_NOTIF_USAGE_ZC_COPIED

constexpr unsigned kSqEntries = 256;
// Every SQE may post two CQEs (completion, notification), and
// notifications may lag by up to the header slots: size the CQ for it.
constexpr unsigned kCqEntries = 8192;
// A registered buffer may not exceed 1 GiB; regions go in pieces.
constexpr uint64_t kPieceBytes = 1ull << 30;
constexpr unsigned kMaxPieces = 1024;
constexpr int kSendFlags = MSG_WAITALL | MSG_NOSIGNAL;

class UringZeroCopyTransport final : public SocketTransport,
                                     private CompletionSource {
 public:
  UringZeroCopyTransport(int fd, const TransportOptions& options)
      : SocketTransport(fd, options),
        slots_(options.header_slots, options.max_header_bytes,
               options.completion, this, &stats_),
        slot_io_(options.header_slots) {}

  ~UringZeroCopyTransport() override {
    if (ring_ready_) io_uring_queue_exit(&ring_);
  }

  absl::Status Init() {
    io_uring_params p{};
    p.flags = IORING_SETUP_CQSIZE;
    p.cq_entries = kCqEntries;
    int r = io_uring_queue_init_params(kSqEntries, &ring_, &p);
    if (r < 0) return ErrnoStatus(-r, "io_uring_queue_init");
    ring_ready_ = true;
    return absl::OkStatus();
  }

  TransportKind kind() const override { return TransportKind::kUringZeroCopy; }
  uint32_t capabilities() const override {
    return kCapZeroCopy | kCapHeaderSlots | kCapCompletionPolicies |
           kCapRegisteredBuffers | kCapBatchedSubmit;
  }

  absl::StatusOr<absl::Span<uint8_t>> AcquireHeader() override {
    return slots_.Acquire();
  }

  absl::Status SendPacket(const OutgoingPacket& packet) override {
    const uint32_t slot = slots_.current();
    uint8_t* header = slots_.buffer(slot).data();
    if (packet.payload.empty()) {
      // SYNC/FINISH: a few dozen bytes, cheaper copied than pinned.
      Queue({slot, Kind::kCopy, header, packet.header_bytes, 0});
    } else if (options_.registered_buffers) {
      if (absl::Status s = QueueFixed(slot, header, packet); !s.ok()) {
        return s;
      }
    } else {
      SlotIo& io = slot_io_[slot];
      io.iov.clear();
      io.iov.push_back({header, packet.header_bytes});
      io.iov.insert(io.iov.end(), packet.payload.begin(), packet.payload.end());
      Queue({slot, Kind::kMsgZc, nullptr,
             packet.header_bytes + IovBytes(packet.payload), 0});
    }
    return slots_.PacketSent();
  }

  absl::Status Submit() override {
    while (!queued_.empty()) {
      if (chain_pending_ > 0) {
        if (absl::Status s = Reap(slots_, /*block=*/true); !s.ok()) return s;
        continue;
      }
      SubmitChain();
    }
    return absl::OkStatus();
  }

  absl::Status Flush() override {
    if (absl::Status s = Submit(); !s.ok()) return s;
    while (chain_pending_ > 0) {
      if (absl::Status s = Reap(slots_, /*block=*/true); !s.ok()) return s;
    }
    return slots_.Flush();
  }

  absl::Status Poll() override { return Reap(slots_, /*block=*/false); }

  absl::Status RegisterRegion(uint32_t region_id, void* base,
                              uint64_t length) override {
    if (!options_.registered_buffers) return absl::OkStatus();
    if (pieces_used_ == 0) {
      int r = io_uring_register_buffers_sparse(&ring_, kMaxPieces);
      if (r < 0) return ErrnoStatus(-r, "io_uring_register_buffers_sparse");
    }
    Registration reg{region_id, static_cast<uint8_t*>(base), length,
                     pieces_used_};
    for (uint64_t off = 0; off < length; off += kPieceBytes) {
      if (pieces_used_ == kMaxPieces) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "registered buffers cover at most %d GiB", kMaxPieces));
      }
      iovec v{reg.base + off, std::min(kPieceBytes, length - off)};
      __u64 tag = 0;
      int r = io_uring_register_buffers_update_tag(&ring_, pieces_used_, &v,
                                                   &tag, 1);
      if (r < 0) {
        return ErrnoStatus(
            -r, absl::StrFormat("registering %d bytes of region %d with "
                                "io_uring (pinned memory counts against "
                                "RLIMIT_MEMLOCK)",
                                v.iov_len, region_id));
      }
      ++pieces_used_;
    }
    registrations_.push_back(reg);
    return absl::OkStatus();
  }

 private:
  enum class Kind : uint8_t { kMsgZc, kCopy, kFixedZc };
  // One SQE: a whole packet (kMsgZc), a header (kCopy), or a page run from
  // a registered buffer (kFixedZc).
  struct Send {
    uint32_t slot;
    Kind kind;
    const uint8_t* buf;  // kCopy, kFixedZc
    size_t total;        // bytes this SQE must carry
    uint16_t buf_index;  // kFixedZc
    uint32_t token = 0;
    size_t done = 0;
    bool completed = false;
  };
  struct SlotIo {
    msghdr msg{};
    std::vector<iovec> iov;
  };
  struct Registration {
    uint32_t region_id;
    uint8_t* base;
    uint64_t length;
    unsigned first_piece;
  };

  void Queue(Send s) {
    s.token = next_token_++;
    slots_.Attach(s.token, s.slot);
    queued_.push_back(s);
  }

  absl::Status QueueFixed(uint32_t slot, uint8_t* header,
                          const OutgoingPacket& packet) {
    const Registration* reg = nullptr;
    for (const Registration& r : registrations_) {
      if (r.region_id == packet.region_id) reg = &r;
    }
    if (reg == nullptr) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "region %d was not registered with io_uring", packet.region_id));
    }
    Queue({slot, Kind::kCopy, header, packet.header_bytes, 0});
    for (size_t i = 0; i < packet.payload.size(); ++i) {
      uint64_t off = packet.payload_offsets[i];
      uint64_t left = packet.payload[i].iov_len;
      while (left > 0) {  // a run may cross a 1 GiB piece boundary
        const uint64_t piece = off / kPieceBytes;
        const uint64_t n = std::min(left, (piece + 1) * kPieceBytes - off);
        Queue({slot, Kind::kFixedZc, reg->base + off, n,
               static_cast<uint16_t>(reg->first_piece + piece)});
        off += n;
        left -= n;
      }
    }
    return absl::OkStatus();
  }

  // Submits queued sends as one linked chain; one chain in flight at most.
  void SubmitChain() {
    io_uring_sqe* last = nullptr;
    while (!queued_.empty() && chain_.size() < kSqEntries) {
      Send& s = queued_.front();
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      switch (s.kind) {
        case Kind::kMsgZc: {
          SlotIo& io = slot_io_[s.slot];
          io.msg = {};
          io.msg.msg_iov = io.iov.data();
          io.msg.msg_iovlen = io.iov.size();
          io_uring_prep_sendmsg_zc(sqe, fd_, &io.msg, kSendFlags);
          sqe->ioprio |= kReportUsage;
          stats_.zc_sends.Add();
          break;
        }
        case Kind::kCopy:
          io_uring_prep_send(sqe, fd_, s.buf, s.total, kSendFlags);
          break;
        case Kind::kFixedZc:
          io_uring_prep_send_zc_fixed(sqe, fd_, s.buf, s.total, kSendFlags, 0,
                                      s.buf_index);
          sqe->ioprio |= kReportUsage;
          stats_.zc_sends.Add();
          break;
      }
      // The chain position for the send CQE, the token for the
      // notification (which carries the same user_data).
      sqe->user_data = (uint64_t{chain_.size()} << 32) | s.token;
      sqe->flags |= IOSQE_IO_LINK;
      last = sqe;
      chain_.push_back(s);
      queued_.pop_front();
    }
    if (last == nullptr) return;
    last->flags &= ~IOSQE_IO_LINK;
    chain_pending_ = chain_.size();
    stats_.send_calls.Add(chain_.size());
    stats_.submit_calls.Add();
    // Errors surface as CQEs; a submit that takes fewer SQEs leaves them
    // in the SQ for the next enter, which Reap performs.
    io_uring_submit(&ring_);
  }

  absl::Status HandleCqe(const io_uring_cqe& cqe) {
    const uint32_t token = static_cast<uint32_t>(cqe.user_data);
    if (cqe.flags & IORING_CQE_F_NOTIF) {
      stats_.zc_notifications.Add();
      return slots_.Complete(
          token, (static_cast<uint32_t>(cqe.res) & kNotifCopied) != 0);
    }
    const uint64_t index = cqe.user_data >> 32;
    if (index >= chain_.size() || chain_[index].token != token ||
        chain_[index].completed) {
      return absl::InternalError(absl::StrFormat(
          "io_uring completion for send %d, which is not in flight", token));
    }
    Send& s = chain_[index];
    s.completed = true;
    --chain_pending_;
    const bool zero_copy = s.kind != Kind::kCopy;
    if (cqe.res >= 0) {
      s.done += static_cast<size_t>(cqe.res);
      if (s.done < s.total) stats_.short_sends.Add();
    } else if (cqe.res == -ENOBUFS) {
      stats_.enobufs_retries.Add();  // resent once notifications free room
    } else if (cqe.res != -ECANCELED && cqe.res != -EAGAIN &&
               cqe.res != -EINTR) {
      return ErrnoStatus(-cqe.res, "io_uring send");
    }
    // No notification follows a completion without F_MORE (a copy, or a
    // zero-copy send that failed early): the slot is free of it now.
    if (!(cqe.flags & IORING_CQE_F_MORE)) {
      if (absl::Status st = slots_.Complete(token, false, false); !st.ok()) {
        return st;
      }
      if (zero_copy && cqe.res > 0) stats_.zc_completions.Add();
    }
    if (chain_pending_ == 0) ResendUnfinished();
    return absl::OkStatus();
  }

  // A short send breaks the link and cancels the rest of the chain: what
  // did not go out goes first in the next chain, in order, each under a
  // fresh token (the old ones complete through their own CQEs).
  void ResendUnfinished() {
    std::vector<Send> again;
    for (Send& s : chain_) {
      if (s.done == s.total) continue;
      if (s.kind == Kind::kMsgZc) {
        std::vector<iovec>& iov = slot_io_[s.slot].iov;
        const size_t left = ConsumeIov(absl::MakeSpan(iov), s.done).size();
        iov.erase(iov.begin(), iov.end() - left);
      } else {
        s.buf += s.done;
      }
      s.total -= s.done;
      s.done = 0;
      s.completed = false;
      again.push_back(s);
    }
    chain_.clear();
    queued_.insert(queued_.begin(), again.begin(), again.end());
    for (size_t i = 0; i < again.size(); ++i) {
      queued_[i].token = next_token_++;
      slots_.Attach(queued_[i].token, queued_[i].slot);
    }
  }

  absl::Status Reap(HeaderSlots&, bool block) override {
    while (true) {
      if (chain_pending_ == 0 && !queued_.empty()) SubmitChain();
      bool got = false;
      io_uring_cqe* cqe;
      while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
        const io_uring_cqe copy = *cqe;
        io_uring_cqe_seen(&ring_, cqe);
        if (absl::Status s = HandleCqe(copy); !s.ok()) return s;
        got = true;
      }
      if (got || !block) return absl::OkStatus();
      if (stopping()) {
        return absl::AbortedError("completion wait interrupted: ending");
      }
      __kernel_timespec ts{};
      const int64_t ns = absl::ToInt64Nanoseconds(options_.stall_timeout);
      ts.tv_sec = ns / 1000000000;
      ts.tv_nsec = ns % 1000000000;
      stats_.submit_calls.Add();
      int r = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
      if (r == -ETIME) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "no io_uring completion for %s (%d sends awaiting completion, "
            "%d notifications): peer stalled",
            absl::FormatDuration(options_.stall_timeout), chain_pending_,
            slots_.outstanding_tokens()));
      }
      if (r < 0 && r != -EINTR) {
        return ErrnoStatus(-r, "io_uring_wait_cqe");
      }
    }
  }

  io_uring ring_{};
  bool ring_ready_ = false;
  HeaderSlots slots_;
  std::vector<SlotIo> slot_io_;
  std::deque<Send> queued_;
  std::vector<Send> chain_;
  size_t chain_pending_ = 0;
  uint32_t next_token_ = 0;
  std::vector<Registration> registrations_;
  unsigned pieces_used_ = 0;
};

}  // namespace

absl::Status ProbeUringZeroCopy() {
  io_uring ring;
  int r = io_uring_queue_init(2, &ring, 0);
  if (r < 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "io_uring is not available: io_uring_setup failed: %s%s", strerror(-r),
        r == -EPERM || r == -ENOSYS
            ? " (disabled by kernel.io_uring_disabled, a seccomp filter, or "
              "a kernel built without CONFIG_IO_URING)"
            : ""));
  }
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  absl::Status s;
  if (probe == nullptr) {
    s = absl::FailedPreconditionError(
        "io_uring cannot report its opcodes (IORING_REGISTER_PROBE, "
        "Linux 5.6+)");
  } else if (!io_uring_opcode_supported(probe, IORING_OP_SENDMSG_ZC) ||
             !io_uring_opcode_supported(probe, IORING_OP_SEND_ZC)) {
    s = absl::FailedPreconditionError(
        "io_uring lacks IORING_OP_SENDMSG_ZC / IORING_OP_SEND_ZC (Linux "
        "6.1+)");
  }
  if (probe != nullptr) io_uring_free_probe(probe);
  io_uring_queue_exit(&ring);
  return s;
}

absl::StatusOr<std::unique_ptr<Transport>> OpenUringZeroCopy(
    int fd, const TransportOptions& options) {
  if (absl::Status s = ProbeUringZeroCopy(); !s.ok()) {
    close(fd);
    return s;
  }
  auto t = std::make_unique<UringZeroCopyTransport>(fd, options);
  if (absl::Status s = t->Init(); !s.ok()) return s;
  return t;
}

}  // namespace ramferry::channels
