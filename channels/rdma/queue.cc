#include "channels/rdma/queue.h"

#include <errno.h>
#include <poll.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"
#include "base/status_macros.h"

namespace ramferry::channels {
namespace {

constexpr uint64_t kInlineControl =
    kValueMask;  // a control send with no buffer

}  // namespace

const char* KindName(uint64_t kind) {
  switch (kind) {
    case kPacketSend:
      return "packet send";
    case kMarkerSend:
      return "marker send";
    case kControlSend:
      return "control send";
    case kRecv:
      return "receive";
    case kPageWrite:
      return "page write";
  }
  return "unknown";
}

RdmaQueue::RdmaQueue(Connection* conn, const RdmaConfig& config,
                     absl::Duration stall_timeout, size_t recv_bytes,
                     TransportStats* stats, Handler* handler)
    : conn_(conn),
      send_queue_(config.send_queue),
      recv_queue_(config.recv_queue),
      stall_timeout_(stall_timeout),
      recv_bytes_(recv_bytes),
      stats_(stats),
      handler_(handler),
      recv_buf_(recv_bytes * config.recv_queue),
      ctl_buf_(kControlBuffers * proto::RdmaControlMaxBytes()),
      ctl_busy_(kControlBuffers, false) {}

RdmaQueue::~RdmaQueue() {
  for (ibv_mr* m : {recv_mr_, ctl_mr_}) {
    if (m != nullptr) ibv_dereg_mr(m);
  }
}

absl::Status RdmaQueue::Init() {
  recv_mr_ = ibv_reg_mr(conn_->pd, recv_buf_.data(), recv_buf_.size(),
                        IBV_ACCESS_LOCAL_WRITE);
  ctl_mr_ = ibv_reg_mr(conn_->pd, ctl_buf_.data(), ctl_buf_.size(),
                       IBV_ACCESS_LOCAL_WRITE);
  if (recv_mr_ == nullptr || ctl_mr_ == nullptr) {
    return RdmaErrno("ibv_reg_mr of the channel's own buffers");
  }
  for (uint32_t i = 0; i < recv_queue_; ++i) {
    RAMFERRY_RETURN_IF_ERROR(PostRecv(i));
  }
  if (ibv_req_notify_cq(conn_->cq, 0) != 0) {
    return RdmaErrno("ibv_req_notify_cq");
  }
  stats_->inline_granted.RaiseTo(conn_->max_inline);
  return absl::OkStatus();
}

void RdmaQueue::CountInline(size_t bytes) {
  stats_->inline_sends.Add();
  stats_->inline_max_bytes.RaiseTo(bytes);
}

absl::Status RdmaQueue::PostRecv(uint32_t index) {
  ibv_sge sge{reinterpret_cast<uint64_t>(message(index)),
              static_cast<uint32_t>(recv_bytes_), recv_mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = WrId(kRecv, index);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad;
  if (int r = ibv_post_recv(conn_->qp, &wr, &bad); r != 0) {
    return base::ErrnoStatus(r, "ibv_post_recv");
  }
  return absl::OkStatus();
}

absl::Status RdmaQueue::Progress() {
  ibv_wc wc[32];
  while (true) {
    int n = ibv_poll_cq(conn_->cq, 32, wc);
    if (n < 0) return absl::InternalError("ibv_poll_cq failed");
    for (int i = 0; i < n; ++i) {
      RAMFERRY_RETURN_IF_ERROR(HandleCompletion(wc[i]));
    }
    if (n < 32) return absl::OkStatus();
  }
}

absl::Status RdmaQueue::ProgressArmed() {
  pollfd p{conn_->cc->fd, POLLIN, 0};
  if (poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0) {
    ibv_cq* cq;
    void* ctx;
    if (ibv_get_cq_event(conn_->cc, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
  }
  if (ibv_req_notify_cq(conn_->cq, 0) != 0) {
    return RdmaErrno("ibv_req_notify_cq");
  }
  return Progress();
}

absl::Status RdmaQueue::WaitFor(absl::FunctionRef<bool()> ready,
                                absl::Duration timeout, const char* what) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    RAMFERRY_RETURN_IF_ERROR(Progress());
    if (ready()) return absl::OkStatus();
    if (stopping()) {
      return absl::AbortedError(absl::StrCat(what, ": channel shut down"));
    }
    // Arm, then look once more: a completion between the last poll and
    // the arming would otherwise not wake us.
    if (ibv_req_notify_cq(conn_->cq, 0) != 0) {
      return RdmaErrno("ibv_req_notify_cq");
    }
    RAMFERRY_RETURN_IF_ERROR(Progress());
    if (ready()) return absl::OkStatus();
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrFormat("%s: no RDMA completion for %s: peer stalled", what,
                          absl::FormatDuration(timeout)));
    }
    pollfd p[2] = {{conn_->cc->fd, POLLIN, 0}, {conn_->ec->fd, POLLIN, 0}};
    // Rounded up, at most a second (left may be infinite).
    const int ms = static_cast<int>(
        std::min<int64_t>(absl::ToInt64Milliseconds(left), 999) + 1);
    int r = poll(p, 2, ms);
    if (r < 0 && errno != EINTR) return RdmaErrno("poll on the RDMA channel");
    if (p[0].revents & POLLIN) {
      ibv_cq* cq;
      void* ctx;
      if (ibv_get_cq_event(conn_->cc, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
      }
    }
    if (p[1].revents & POLLIN) {
      absl::StatusOr<CmEvent> ev = NextCmEvent(conn_->ec, absl::Now());
      if (ev.ok() && (ev->type == RDMA_CM_EVENT_DISCONNECTED ||
                      ev->type == RDMA_CM_EVENT_DEVICE_REMOVAL)) {
        conn_->connected = false;
        return absl::UnavailableError(absl::StrCat(
            what, ": the peer disconnected (", rdma_event_str(ev->type), ")"));
      }
    }
  }
}

absl::Status RdmaQueue::HandleCompletion(const ibv_wc& wc) {
  const uint64_t kind = wc.wr_id >> kKindShift;
  const uint64_t value = wc.wr_id & kValueMask;
  if (wc.status != IBV_WC_SUCCESS) {
    if (stopping() && wc.status == IBV_WC_WR_FLUSH_ERR) {
      return absl::AbortedError("RDMA channel shut down");
    }
    return absl::UnavailableError(absl::StrFormat(
        "RDMA %s failed: %s (vendor error 0x%x)", KindName(kind),
        ibv_wc_status_str(wc.status), wc.vendor_err));
  }
  ++completions_;
  switch (kind) {
    case kPageWrite:  // the end of one part of a long packet
      return Retire(wc.wr_id);
    case kPacketSend:
    case kMarkerSend:
    case kControlSend:
      RAMFERRY_RETURN_IF_ERROR(Retire(wc.wr_id));
      if (kind == kControlSend) {
        if (value != kInlineControl) ctl_busy_[value] = false;
        return absl::OkStatus();
      }
      // Only a packet with pages was a zero-copy send (its WRITEs read
      // the caller's memory in place).
      return handler_->OnPacketSent(static_cast<uint32_t>(value),
                                    /*zero_copy=*/kind == kPacketSend);
    case kRecv:
      if (value >= recv_queue_) break;
      return handler_->OnReceive(static_cast<uint32_t>(value), wc.byte_len);
  }
  return absl::InternalError(
      absl::StrFormat("RDMA completion with unknown wr_id 0x%x", wc.wr_id));
}

// Posts complete in order on an RC QP; every post signals its last WR.
absl::Status RdmaQueue::Retire(uint64_t wr_id) {
  if (posted_.empty() || posted_.front().wr_id != wr_id) {
    return absl::InternalError(
        absl::StrFormat("RDMA send completion 0x%x out of order", wr_id));
  }
  outstanding_ -= posted_.front().wrs;
  posted_.pop_front();
  if (outstanding_ == 0) stats_->rdma_drains_to_zero.Add();
  return absl::OkStatus();
}

absl::Status RdmaQueue::Post(ibv_send_wr* first, uint32_t wrs, uint64_t wr_id,
                             uint32_t sends) {
  if (wrs > send_queue_) {
    return absl::InternalError(absl::StrFormat(
        "a post of %d work requests cannot fit a send queue of %d", wrs,
        send_queue_));
  }
  if (!credits_.CanSend(sends)) {
    stats_->rdma_credit_waits.Add();
    if (absl::Status s =
            WaitFor([&] { return credits_.CanSend(sends); }, stall_timeout_,
                    "awaiting receive credits from the peer");
        !s.ok()) {
      return s;
    }
  }
  if (outstanding_ + wrs > send_queue_) {
    stats_->rdma_sq_full_hits.Add();
    if (absl::Status s =
            WaitFor([&] { return outstanding_ + wrs <= send_queue_; },
                    stall_timeout_, "send queue full");
        !s.ok()) {
      return s;
    }
  }
  ibv_send_wr* bad;
  if (int r = ibv_post_send(conn_->qp, first, &bad); r != 0) {
    return base::ErrnoStatus(r, "ibv_post_send");
  }
  credits_.Take(sends);
  posted_.push_back({wr_id, wrs});
  outstanding_ += wrs;
  stats_->rdma_outstanding_max.RaiseTo(outstanding_);
  stats_->rdma_posts.Add();
  stats_->rdma_wrs.Add(wrs);
  stats_->send_calls.Add();
  return absl::OkStatus();
}

absl::Status RdmaQueue::SendControl(const proto::RdmaControl& control) {
  return SendMessage(proto::EncodeRdmaControl(control));
}

absl::Status RdmaQueue::SendMessage(absl::Span<const uint8_t> bytes) {
  if (bytes.size() > proto::RdmaControlMaxBytes()) {
    return absl::InternalError(absl::StrFormat(
        "an RDMA message of %d bytes exceeds the control buffers' %d",
        bytes.size(), proto::RdmaControlMaxBytes()));
  }
  ibv_send_wr wr{};
  ibv_sge sge{};
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  sge.length = static_cast<uint32_t>(bytes.size());
  if (bytes.size() <= conn_->max_inline) {
    // Inline: the provider copies at post time; no buffer to hold.
    sge.addr = reinterpret_cast<uint64_t>(bytes.data());
    wr.send_flags |= IBV_SEND_INLINE;
    wr.wr_id = WrId(kControlSend, kInlineControl);
    CountInline(bytes.size());
  } else {
    size_t i = 0;
    if (absl::Status s = WaitFor(
            [&] {
              for (i = 0; i < kControlBuffers; ++i) {
                if (!ctl_busy_[i]) return true;
              }
              return false;
            },
            stall_timeout_, "awaiting a control buffer");
        !s.ok()) {
      return s;
    }
    uint8_t* buf = ctl_buf_.data() + i * proto::RdmaControlMaxBytes();
    std::memcpy(buf, bytes.data(), bytes.size());
    ctl_busy_[i] = true;
    sge.addr = reinterpret_cast<uint64_t>(buf);
    sge.lkey = ctl_mr_->lkey;
    wr.wr_id = WrId(kControlSend, i);
  }
  return Post(&wr, 1, wr.wr_id, /*sends=*/1);
}

absl::Status RdmaQueue::GrantCredits(uint32_t credits) {
  stats_->rdma_credit_returns.Add();
  return credits_.Grant(credits);
}

absl::Status RdmaQueue::SendCreditsMessage(uint32_t credits) {
  proto::RdmaControl c;
  c.type = proto::RdmaControlType::kCredits;
  c.credits = credits;
  return SendControl(c);
}

absl::Status RdmaQueue::GrantReceiveQueue() {
  returns_.emplace(recv_queue_);
  return SendCreditsMessage(recv_queue_);
}

absl::Status RdmaQueue::Release(uint32_t index) {
  RAMFERRY_RETURN_IF_ERROR(PostRecv(index));
  if (!returns_.has_value()) return absl::OkStatus();
  returns_->Reposted();
  const uint32_t due = returns_->TakeDue();
  if (due == 0) return absl::OkStatus();
  stats_->rdma_credit_returns.Add();
  return SendCreditsMessage(due);
}

}  // namespace ramferry::channels
