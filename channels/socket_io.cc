#include "channels/socket_io.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

#include <cstdint>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"
#include "base/status_macros.h"

namespace ramferry::channels {

absl::Status MakeBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return base::ErrnoStatus(errno, "fcntl(O_NONBLOCK)");
  }
  return absl::OkStatus();
}

absl::Status SetStallTimeouts(int fd, absl::Duration stall) {
  timeval tv = absl::ToTimeval(stall);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
    return base::ErrnoStatus(errno, "setting socket stall timeouts");
  }
  return absl::OkStatus();
}

absl::Status SetNoDelay(int fd) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    return base::ErrnoStatus(errno, "setsockopt(TCP_NODELAY)");
  }
  return absl::OkStatus();
}

size_t IovBytes(absl::Span<const iovec> iov) {
  size_t n = 0;
  for (const iovec& v : iov) n += v.iov_len;
  return n;
}

absl::Span<iovec> ConsumeIov(absl::Span<iovec> iov, size_t n) {
  size_t i = 0;
  while (i < iov.size() && n >= iov[i].iov_len) {
    n -= iov[i].iov_len;
    ++i;
  }
  iov.remove_prefix(i);
  if (n > 0) {
    iov[0].iov_base = static_cast<uint8_t*>(iov[0].iov_base) + n;
    iov[0].iov_len -= n;
  }
  return iov;
}

absl::Status SendAll(int fd, absl::Span<iovec> iov, int flags,
                     absl::Duration stall, const std::atomic<bool>& stop,
                     const SendHooks& hooks) {
  size_t left = IovBytes(iov);
  absl::Time last_progress = absl::Now();
  while (left > 0) {
    msghdr msg{};
    msg.msg_iov = iov.data();
    // IOV_MAX is 1024; a packet never has more spans than pages + 1 and the
    // pages bound is 4096, so send at most IOV_MAX spans per call.
    msg.msg_iovlen = std::min<size_t>(iov.size(), IOV_MAX);
    ssize_t n = sendmsg(fd, &msg, flags);
    if (n > 0) {
      left -= static_cast<size_t>(n);
      hooks.on_call(static_cast<size_t>(n), left > 0);
      iov = ConsumeIov(iov, static_cast<size_t>(n));
      last_progress = absl::Now();
      continue;
    }
    int err = n == 0 ? EPIPE : errno;
    if (stop.load(std::memory_order_acquire)) {
      return absl::AbortedError("send interrupted: session is ending");
    }
    if (err == EINTR) continue;
    if (err == ENOBUFS) {
      RAMFERRY_RETURN_IF_ERROR(hooks.on_no_buffers());
      continue;
    }
    if (err == EAGAIN || err == EWOULDBLOCK) {
      if (absl::Now() - last_progress < stall) continue;
      return absl::DeadlineExceededError(
          absl::StrFormat("send made no progress for %s: peer stalled",
                          absl::FormatDuration(stall)));
    }
    return base::ErrnoStatus(err, "sendmsg");
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, absl::Span<iovec> iov, size_t idle_at,
                     absl::Duration stall, const std::atomic<bool>& stop,
                     size_t* calls) {
  const size_t total = IovBytes(iov);
  size_t done = 0;
  absl::Time last_progress = absl::Now();
  while (done < total) {
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = std::min<size_t>(iov.size(), IOV_MAX);
    ssize_t n = recvmsg(fd, &msg, MSG_WAITALL);
    ++*calls;
    if (n > 0) {
      done += static_cast<size_t>(n);
      iov = ConsumeIov(iov, static_cast<size_t>(n));
      last_progress = absl::Now();
      continue;
    }
    if (stop.load(std::memory_order_acquire)) {
      return absl::AbortedError("read interrupted: session is ending");
    }
    if (n == 0) {
      if (done == idle_at) {
        return absl::UnavailableError("connection closed by peer");
      }
      return absl::UnavailableError(absl::StrFormat(
          "connection closed by peer mid-packet, after %d of %d bytes", done,
          total));
    }
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      if (done == idle_at || absl::Now() - last_progress < stall) {
        continue;
      }
      return absl::DeadlineExceededError(absl::StrFormat(
          "no data for %s mid-packet (%d of %d bytes): peer stalled",
          absl::FormatDuration(stall), done, total));
    }
    return base::ErrnoStatus(err, "recvmsg");
  }
  return absl::OkStatus();
}

}  // namespace ramferry::channels
