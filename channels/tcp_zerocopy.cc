#include "channels/tcp_zerocopy.h"

#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"
#include "base/status_macros.h"
#include "channels/header_slots.h"
#include "channels/socket_transport.h"
#include "channels/transport_family.h"

namespace ramferry::channels {
namespace {

class TcpZeroCopyTransport final : public SocketTransport,
                                   private CompletionSource {
 public:
  TcpZeroCopyTransport(int fd, const TransportOptions& options)
      : SocketTransport(fd, options),
        slots_(options.header_slots, options.max_header_bytes,
               options.completion, this, &stats_) {}

  TransportKind kind() const override { return TransportKind::kTcpZeroCopy; }
  uint32_t capabilities() const override { return StaticCapabilities(kind()); }

  absl::StatusOr<absl::Span<uint8_t>> AcquireHeader() override {
    return slots_.Acquire();
  }

  absl::Status SendPacket(const OutgoingPacket& packet) override {
    // The caller filled the current slot, which AcquireHeader() freed.
    BuildIov(slots_.buffer(slots_.current()).data(), packet);
    absl::Status s;
    if (packet.payload.empty()) {
      // A header-only packet (SYNC, FINISH) is tens of bytes: copying it is
      // cheaper than pinning a page and reaping a completion for it.
      s = SendIov(
          0, [this] { return MakeRoom(); }, [](size_t) {});
      if (!s.ok()) return s;
      return slots_.PacketSent();
    }
    s = SendIov(
        MSG_ZEROCOPY, [this] { return MakeRoom(); },
        [this](size_t) {
          // Every MSG_ZEROCOPY call that takes bytes gets the next id of this
          // socket's counter; a call that fails takes none.
          stats_.zc_sends.Add();
          slots_.Attach(next_id_++);
        });
    if (!s.ok()) return s;
    return slots_.PacketSent();
  }

  absl::Status Flush() override { return slots_.Flush(); }

  absl::Status Poll() override {
    if (slots_.outstanding_tokens() != 0) {
      RAMFERRY_RETURN_IF_ERROR(Reap(slots_, /*block=*/false));
    }
    return CheckDelivery();
  }

 private:
  // ENOBUFS: the socket's optmem (or the memlock limit) is full of
  // notifications or pinned pages. Reaping releases both; with nothing in
  // flight there is nothing to wait for, so it is a hard limit.
  absl::Status MakeRoom() {
    stats_.enobufs_retries.Add();
    if (slots_.outstanding_tokens() == 0) {
      return absl::ResourceExhaustedError(
          "MSG_ZEROCOPY send failed with ENOBUFS with no send in flight: the "
          "kernel cannot pin more pages for this process; raise "
          "RLIMIT_MEMLOCK (ulimit -l) or net.core.optmem_max, or run with "
          "CAP_IPC_LOCK");
    }
    return Reap(slots_, /*block=*/true);
  }

  absl::Status Reap(HeaderSlots& slots, bool block) override {
    bool got_any = false;
    while (true) {
      alignas(cmsghdr) char control[128];
      msghdr msg{};
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      ssize_t n = recvmsg(fd_, &msg, MSG_ERRQUEUE | MSG_DONTWAIT);
      if (n >= 0) {
        RAMFERRY_RETURN_IF_ERROR(HandleNotification(msg, slots));
        got_any = true;
        continue;
      }
      int err = errno;
      if (err == EINTR) continue;
      if (err != EAGAIN && err != EWOULDBLOCK) {
        return base::ErrnoStatus(err, "reading MSG_ZEROCOPY completions");
      }
      if (got_any || !block) return absl::OkStatus();
      RAMFERRY_RETURN_IF_ERROR(WaitForErrqueue());
    }
  }

  absl::Status HandleNotification(const msghdr& msg, HeaderSlots& slots) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
         c = CMSG_NXTHDR(const_cast<msghdr*>(&msg), c)) {
      bool recverr =
          (c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
          (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR);
      if (!recverr) continue;
      sock_extended_err err;
      std::memcpy(&err, CMSG_DATA(c), sizeof err);
      if (err.ee_origin != SO_EE_ORIGIN_ZEROCOPY) {
        return base::ErrnoStatus(err.ee_errno != 0 ? err.ee_errno : EIO,
                                 "socket error queue");
      }
      if (err.ee_errno != 0) {
        return base::ErrnoStatus(err.ee_errno, "zero-copy completion");
      }
      stats_.zc_notifications.Add();
      const bool copied = (err.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) != 0;
      // [ee_info, ee_data] inclusive; ids are u32 and may wrap.
      for (uint32_t id = err.ee_info;; ++id) {
        RAMFERRY_RETURN_IF_ERROR(slots.Complete(id, copied));
        if (id == err.ee_data) break;
      }
      return absl::OkStatus();
    }
    return absl::InternalError("error queue message without IP_RECVERR");
  }

  // Blocks until the error queue has something, the peer is gone, or the
  // stall timeout passes.
  absl::Status WaitForErrqueue() {
    const absl::Time deadline = absl::Now() + options_.stall_timeout;
    while (true) {
      if (stopping()) {
        return absl::AbortedError("completion wait interrupted: ending");
      }
      // events = 0: only POLLERR (error queue or socket error) and POLLHUP
      // can wake us; the peer never sends data on a data channel.
      pollfd p{fd_, 0, 0};
      const int ms = static_cast<int>(std::min<int64_t>(
          absl::ToInt64Milliseconds(deadline - absl::Now()), 1 << 30));
      if (ms <= 0) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "no zero-copy completion for %s (%d sends outstanding)",
            absl::FormatDuration(options_.stall_timeout),
            slots_.outstanding_tokens()));
      }
      int r = poll(&p, 1, ms);
      if (r < 0) {
        if (errno == EINTR) continue;
        return base::ErrnoStatus(errno, "poll for zero-copy completions");
      }
      if (r == 0) continue;
      // POLLERR can mean a pending socket error rather than a notification:
      // it stays raised until read, so read it rather than spin.
      int so_error = 0;
      socklen_t len = sizeof so_error;
      if ((p.revents & (POLLERR | POLLHUP)) &&
          getsockopt(fd_, SOL_SOCKET, SO_ERROR, &so_error, &len) == 0 &&
          so_error != 0) {
        return base::ErrnoStatus(so_error,
                                 "connection failed awaiting completions");
      }
      if ((p.revents & POLLHUP) && !(p.revents & POLLERR)) {
        return absl::UnavailableError(
            "connection closed while zero-copy sends awaited completion");
      }
      return absl::OkStatus();
    }
  }

  HeaderSlots slots_;
  uint32_t next_id_ = 0;  // mirrors the kernel's per-socket zerocopy id
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> OpenTcpZeroCopy(
    int fd, const TransportOptions& options) {
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) != 0) {
    absl::Status s = base::ErrnoStatus(
        errno, "setsockopt(SO_ZEROCOPY): kernel has no MSG_ZEROCOPY for TCP");
    close(fd);
    return s;
  }
  return std::make_unique<TcpZeroCopyTransport>(fd, options);
}

}  // namespace ramferry::channels
