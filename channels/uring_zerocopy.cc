#include "channels/uring_zerocopy.h"

#include <errno.h>
#include <liburing.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/status_macros.h"
#include "channels/header_slots.h"
#include "channels/send_chain.h"
#include "channels/socket_io.h"
#include "channels/socket_transport.h"
#include "channels/transport_family.h"

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
// UIO_MAXIOV: the most iovecs one sendmsg takes; a packet of more page runs
// goes as several linked sends (the most a 4096-page packet needs is five).
constexpr size_t kMaxIov = 1024;

// The opcodes a transport submits, on `ring`.
absl::Status CheckOpcodes(io_uring& ring) {
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  if (probe == nullptr) {
    return absl::FailedPreconditionError(
        "io_uring cannot report its opcodes (IORING_REGISTER_PROBE, "
        "Linux 5.6+)");
  }
  absl::Status s;
  if (!io_uring_opcode_supported(probe, IORING_OP_SENDMSG_ZC) ||
      !io_uring_opcode_supported(probe, IORING_OP_SEND_ZC)) {
    s = absl::FailedPreconditionError(
        "io_uring lacks IORING_OP_SENDMSG_ZC / IORING_OP_SEND_ZC (Linux "
        "6.1+)");
  }
  io_uring_free_probe(probe);
  return s;
}

class UringZeroCopyTransport final : public SocketTransport,
                                     private CompletionSource {
 public:
  UringZeroCopyTransport(int fd, const TransportOptions& options)
      : SocketTransport(fd, options),
        slots_(options.header_slots, options.max_header_bytes,
               options.completion, this, &stats_),
        chain_(&slots_, &stats_, kSqEntries),
        slot_io_(options.header_slots) {}

  ~UringZeroCopyTransport() override {
    if (ring_ready_) io_uring_queue_exit(&ring_);
  }

  absl::Status Init() {
    io_uring_params p{};
    p.flags = IORING_SETUP_CQSIZE;
    p.cq_entries = kCqEntries;
    int r = io_uring_queue_init_params(kSqEntries, &ring_, &p);
    if (r < 0) return base::ErrnoStatus(-r, "io_uring_queue_init");
    ring_ready_ = true;
    return CheckOpcodes(ring_);
  }

  TransportKind kind() const override { return TransportKind::kUringZeroCopy; }
  uint32_t capabilities() const override { return StaticCapabilities(kind()); }

  absl::StatusOr<absl::Span<uint8_t>> AcquireHeader() override {
    return slots_.Acquire();
  }

  absl::Status SendPacket(const OutgoingPacket& packet) override {
    const uint32_t slot = slots_.current();
    uint8_t* header = slots_.buffer(slot).data();
    if (packet.payload.empty()) {
      // SYNC/FINISH: a few dozen bytes, cheaper copied than pinned.
      chain_.Queue(Copy(slot, header, packet.header_bytes));
    } else if (options_.registered_buffers && !packet.payload_offsets.empty()) {
      // A payload without offsets is not region memory (a sealed or
      // compressed copy): no registered buffer holds it, so it goes below.
      RAMFERRY_RETURN_IF_ERROR(QueueFixed(slot, header, packet));
    } else {
      QueueMessage(slot, header, packet);
    }
    return slots_.PacketSent();
  }

  absl::Status Submit() override {
    while (chain_.has_queued()) {
      if (chain_.in_flight() || chain_.starved()) {
        RAMFERRY_RETURN_IF_ERROR(Reap(slots_, /*block=*/true));
        continue;
      }
      RAMFERRY_RETURN_IF_ERROR(SubmitChain());
    }
    return absl::OkStatus();
  }

  absl::Status Flush() override {
    RAMFERRY_RETURN_IF_ERROR(Submit());
    while (chain_.in_flight()) {
      RAMFERRY_RETURN_IF_ERROR(Reap(slots_, /*block=*/true));
    }
    return slots_.Flush();
  }

  absl::Status Poll() override {
    RAMFERRY_RETURN_IF_ERROR(Reap(slots_, /*block=*/false));
    return CheckDelivery();
  }

  absl::Status RegisterRegion(uint32_t region_id, void* base,
                              uint64_t length) override {
    if (!options_.registered_buffers) return absl::OkStatus();
    if (pieces_used_ == 0) {
      int r = io_uring_register_buffers_sparse(&ring_, kMaxPieces);
      if (r < 0) {
        return base::ErrnoStatus(-r, "io_uring_register_buffers_sparse");
      }
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
        return base::ErrnoStatus(
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
  // SendChain::Send::kind values.
  static constexpr uint8_t kMsgZc = 0;    // header + pages, SENDMSG_ZC
  static constexpr uint8_t kCopy = 1;     // a header, copied SEND
  static constexpr uint8_t kFixedZc = 2;  // a page run, SEND_ZC fixed

  struct SlotIo {
    std::vector<iovec> iov;     // the packet: header, then pages
    std::vector<msghdr> msgs;   // one per part of at most kMaxIov iovecs
    std::vector<iovec> resend;  // what is left of a part after a short send
  };
  struct Registration {
    uint32_t region_id;
    uint8_t* base;
    uint64_t length;
    unsigned first_piece;
  };

  static SendChain::Send Copy(uint32_t slot, const uint8_t* buf, size_t bytes) {
    SendChain::Send s;
    s.slot = slot;
    s.kind = kCopy;
    s.buf = buf;
    s.total = bytes;
    return s;
  }

  // Header and pages in one SENDMSG_ZC, or in linked parts of at most
  // kMaxIov iovecs where the packet has more runs.
  void QueueMessage(uint32_t slot, uint8_t* header,
                    const OutgoingPacket& packet) {
    SlotIo& io = slot_io_[slot];
    io.iov.clear();
    io.iov.push_back({header, packet.header_bytes});
    io.iov.insert(io.iov.end(), packet.payload.begin(), packet.payload.end());
    const size_t parts = (io.iov.size() + kMaxIov - 1) / kMaxIov;
    io.msgs.resize(parts);
    for (size_t part = 0; part < parts; ++part) {
      SendChain::Send s;
      s.slot = slot;
      s.kind = kMsgZc;
      s.zero_copy = true;
      s.part = static_cast<uint32_t>(part);
      s.total = IovBytes(PartIov(io, s.part));
      chain_.Queue(s);
    }
  }

  static absl::Span<iovec> PartIov(SlotIo& io, uint32_t part) {
    const size_t first = size_t{part} * kMaxIov;
    return absl::MakeSpan(io.iov).subspan(first, kMaxIov);
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
    if (packet.payload_offsets.size() != packet.payload.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a packet of %d payload runs came with %d region offsets",
          packet.payload.size(), packet.payload_offsets.size()));
    }
    for (size_t i = 0; i < packet.payload.size(); ++i) {
      if (packet.payload_offsets[i] > reg->length ||
          packet.payload[i].iov_len > reg->length - packet.payload_offsets[i]) {
        return absl::OutOfRangeError(absl::StrFormat(
            "payload run %d (%d bytes at offset %d) is outside region %d "
            "(%d bytes)",
            i, packet.payload[i].iov_len, packet.payload_offsets[i],
            packet.region_id, reg->length));
      }
      // What goes is read through the registration: it must be the run.
      if (packet.payload[i].iov_base != reg->base + packet.payload_offsets[i]) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "payload run %d is not at its offset %d in region %d", i,
            packet.payload_offsets[i], packet.region_id));
      }
    }
    chain_.Queue(Copy(slot, header, packet.header_bytes));
    for (size_t i = 0; i < packet.payload.size(); ++i) {
      uint64_t off = packet.payload_offsets[i];
      uint64_t left = packet.payload[i].iov_len;
      while (left > 0) {  // a run may cross a 1 GiB piece boundary
        const uint64_t piece = off / kPieceBytes;
        SendChain::Send s;
        s.slot = slot;
        s.kind = kFixedZc;
        s.zero_copy = true;
        s.buf = reg->base + off;
        s.total = std::min(left, (piece + 1) * kPieceBytes - off);
        s.buf_index = static_cast<uint16_t>(reg->first_piece + piece);
        chain_.Queue(s);
        off += s.total;
        left -= s.total;
      }
    }
    return absl::OkStatus();
  }

  // Submits the next chain, linked, in one io_uring_enter.
  absl::Status SubmitChain() {
    absl::Span<const SendChain::Send> sends = chain_.Start();
    if (sends.empty()) return absl::OkStatus();
    io_uring_sqe* sqe = nullptr;
    for (size_t i = 0; i < sends.size(); ++i) {
      const SendChain::Send& s = sends[i];
      sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {
        // A chain is at most the queue's size and goes alone, all of it
        // submitted before the next starts: the queue cannot be full.
        return absl::InternalError(absl::StrFormat(
            "io_uring submission queue full at send %d of a chain of %d", i,
            sends.size()));
      }
      if (s.kind == kMsgZc) {
        SlotIo& io = slot_io_[s.slot];
        absl::Span<iovec> iov = PartIov(io, s.part);
        if (s.offset > 0) {
          io.resend.assign(iov.begin(), iov.end());
          iov = ConsumeIov(absl::MakeSpan(io.resend), s.offset);
        }
        msghdr& msg = io.msgs[s.part];
        msg = {};
        msg.msg_iov = iov.data();
        msg.msg_iovlen = iov.size();
        io_uring_prep_sendmsg_zc(sqe, fd_, &msg, kSendFlags);
      } else if (s.kind == kCopy) {
        io_uring_prep_send(sqe, fd_, s.buf + s.offset, s.total - s.offset,
                           kSendFlags);
      } else {
        io_uring_prep_send_zc_fixed(sqe, fd_, s.buf + s.offset,
                                    s.total - s.offset, kSendFlags, 0,
                                    s.buf_index);
      }
      if (s.zero_copy) {
        sqe->ioprio |= kReportUsage;
        stats_.zc_sends.Add();
      }
      sqe->user_data = chain_.UserData(i);
      sqe->flags |= IOSQE_IO_LINK;
    }
    sqe->flags &= ~IOSQE_IO_LINK;  // the chain ends here
    stats_.send_calls.Add(sends.size());
    unsubmitted_ = static_cast<unsigned>(sends.size());
    return SubmitQueued();
  }

  // Hands the prepared SQEs to the kernel. One it does not take now
  // (EAGAIN, EBUSY: completions must be reaped first) is tried again
  // before the next wait; a wait with SQEs not taken would only time out.
  absl::Status SubmitQueued() {
    while (unsubmitted_ > 0) {
      stats_.submit_calls.Add();
      const int r = io_uring_submit(&ring_);
      if (r > 0) {
        unsubmitted_ -= std::min(unsubmitted_, static_cast<unsigned>(r));
        continue;
      }
      if (r == -EINTR) continue;
      if (r == 0 || r == -EAGAIN || r == -EBUSY) return absl::OkStatus();
      return base::ErrnoStatus(-r, "io_uring_submit");
    }
    return absl::OkStatus();
  }

  absl::Status HandleCqe(const io_uring_cqe& cqe) {
    if (cqe.flags & IORING_CQE_F_NOTIF) {
      stats_.zc_notifications.Add();
      --notifications_due_;
      chain_.RoomFreed();
      return slots_.Complete(
          SendChain::TokenOf(cqe.user_data),
          (static_cast<uint32_t>(cqe.res) & kNotifCopied) != 0);
    }
    const bool notification_follows = (cqe.flags & IORING_CQE_F_MORE) != 0;
    if (notification_follows) ++notifications_due_;
    return chain_.OnCompletion(cqe.user_data, cqe.res, notification_follows);
  }

  absl::Status Reap(HeaderSlots&, bool block) override {
    while (true) {
      RAMFERRY_RETURN_IF_ERROR(SubmitQueued());
      if (!chain_.in_flight() && chain_.has_queued()) {
        if (chain_.starved() && notifications_due_ == 0) {
          return absl::ResourceExhaustedError(
              "io_uring zero-copy send failed with ENOBUFS with no send in "
              "flight: the kernel cannot pin more pages for this process; "
              "raise RLIMIT_MEMLOCK (ulimit -l) or net.core.optmem_max, or "
              "run with CAP_IPC_LOCK");
        }
        RAMFERRY_RETURN_IF_ERROR(SubmitChain());
      }
      bool got = false;
      io_uring_cqe* cqe;
      while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
        const io_uring_cqe copy = *cqe;
        io_uring_cqe_seen(&ring_, cqe);
        RAMFERRY_RETURN_IF_ERROR(HandleCqe(copy));
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
            "no io_uring completion for %s (%d sends outstanding%s): peer "
            "stalled",
            absl::FormatDuration(options_.stall_timeout),
            slots_.outstanding_tokens(),
            unsubmitted_ == 0
                ? ""
                : absl::StrFormat(", %d the kernel would not take",
                                  unsubmitted_)));
      }
      if (r < 0 && r != -EINTR) {
        return base::ErrnoStatus(-r, "io_uring_wait_cqe");
      }
    }
  }

  io_uring ring_{};
  bool ring_ready_ = false;
  HeaderSlots slots_;
  SendChain chain_;
  std::vector<SlotIo> slot_io_;
  std::vector<Registration> registrations_;
  unsigned pieces_used_ = 0;
  unsigned unsubmitted_ = 0;        // prepared SQEs the kernel has not taken
  uint64_t notifications_due_ = 0;  // sends whose pages are still pinned
};

}  // namespace

namespace {

// IORING_SEND_ZC_REPORT_USAGE (Linux 6.2, and 6.1 stable from its
// backport), which every zero-copy send sets. A kernel without it refuses
// the flag while preparing the SQE (EINVAL), before it looks at the
// socket; one with it gets as far as the file, -1 here (EBADF). Nothing
// is sent.
absl::Status CheckReportUsage(io_uring& ring) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  if (sqe == nullptr) return absl::InternalError("probe ring has no SQE");
  io_uring_prep_send_zc(sqe, -1, nullptr, 0, 0, 0);
  sqe->ioprio |= kReportUsage;
  sqe->user_data = 1;
  if (int r = io_uring_submit_and_wait(&ring, 1); r < 0) {
    return base::ErrnoStatus(-r, "io_uring_submit_and_wait (probe)");
  }
  int res = 0;
  io_uring_cqe* cqe;
  while (io_uring_peek_cqe(&ring, &cqe) == 0) {
    if ((cqe->flags & IORING_CQE_F_NOTIF) == 0) res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
  }
  if (res == -EINVAL) {
    return absl::FailedPreconditionError(
        "io_uring zero-copy sends cannot report whether the kernel copied "
        "(IORING_SEND_ZC_REPORT_USAGE: Linux 6.2, or a 6.1 stable kernel "
        "with its backport)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ProbeUringZeroCopy() {
  io_uring ring;
  int r = io_uring_queue_init(2, &ring, 0);
  if (r < 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "io_uring is not available: io_uring_setup failed: %s%s",
        strerrordesc_np(-r),
        r == -EPERM || r == -ENOSYS
            ? " (disabled by kernel.io_uring_disabled, a seccomp filter, or "
              "a kernel built without CONFIG_IO_URING)"
            : ""));
  }
  absl::Status s = CheckOpcodes(ring);
  if (s.ok()) s = CheckReportUsage(ring);
  io_uring_queue_exit(&ring);
  return s;
}

absl::StatusOr<std::unique_ptr<Transport>> OpenUringZeroCopy(
    int fd, const TransportOptions& options) {
  // The session probed the kernel once (ResolveTransport); each channel
  // checks its own ring's opcodes instead of making a second ring.
  auto t = std::make_unique<UringZeroCopyTransport>(fd, options);
  RAMFERRY_RETURN_IF_ERROR(t->Init());
  return t;
}

}  // namespace ramferry::channels
