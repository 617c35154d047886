#include "handoff/unix_seqpacket.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace ramferry::handoff {
namespace {

absl::Status SysError(absl::string_view what, int err) {
  return absl::UnavailableError(
      absl::StrCat(what, ": ", std::generic_category().message(err)));
}

absl::StatusOr<sockaddr_un> Address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof a.sun_path) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unix socket path '%s' must be 1 to %d bytes", path,
                        sizeof a.sun_path - 1));
  }
  std::memcpy(a.sun_path, path.data(), path.size());
  return a;
}

absl::StatusOr<base::OwnedFd> NewSocket() {
  base::OwnedFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return SysError("socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  return fd;
}

// poll() for `events` up to `timeout`; false on a timeout.
absl::StatusOr<bool> WaitFor(int fd, short events, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    // Polls once at least, so a zero timeout still sees what is ready.
    int ms = -1;
    if (timeout != absl::InfiniteDuration()) {
      const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now() +
                                                     absl::Microseconds(999));
      ms = static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
    }
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, ms);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return SysError("poll", errno);
    if (n == 0 && timeout != absl::InfiniteDuration() &&
        absl::Now() >= deadline) {
      return false;
    }
  }
}

// SO_PEERPIDFD (Linux 6.5): Debian 12's headers lack it.
constexpr int kSoPeerPidfd = 77;

absl::StatusOr<ucred> PeerCredentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return SysError("SO_PEERCRED", errno);
  }
  return cred;
}

// A peer either end deals with: this user, or root.
bool Trusted(const ucred& cred) {
  return cred.uid == 0 || cred.uid == geteuid();
}

}  // namespace

void SeqpacketListener::Close() {
  if (!fd_.valid()) return;
  fd_.Reset();
  struct stat st;
  if (lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ &&
      st.st_ino == ino_) {
    unlink(path_.c_str());
  }
}

absl::StatusOr<SeqpacketListener> ListenSeqpacket(const std::string& path) {
  absl::StatusOr<sockaddr_un> a = Address(path);
  if (!a.ok()) return a.status();
  absl::StatusOr<base::OwnedFd> fd = NewSocket();
  if (!fd.ok()) return fd.status();
  auto bind_it = [&] {
    return bind(fd->get(), reinterpret_cast<const sockaddr*>(&*a), sizeof *a) ==
           0;
  };
  if (!bind_it()) {
    if (errno != EADDRINUSE) {
      return SysError(absl::StrCat("bind ", path), errno);
    }
    // A socket file is there: replace it only if nobody listens on it.
    RAMFERRY_ASSIGN_OR_RETURN(base::OwnedFd probe, NewSocket());
    if (connect(probe.get(), reinterpret_cast<const sockaddr*>(&*a),
                sizeof *a) == 0 ||
        errno != ECONNREFUSED) {
      return absl::AlreadyExistsError(absl::StrCat(
          path,
          " is in use (another process listens there, or it is not a "
          "socket): choose another path"));
    }
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) ||
        unlink(path.c_str()) != 0 || !bind_it()) {
      return SysError(absl::StrCat("bind ", path), errno);
    }
  }
  // Who connects gets the memory: this user only (AcceptSeqpacket checks
  // the peer's credentials too, which a permissive directory cannot undo).
  if (chmod(path.c_str(), 0600) != 0) {
    return SysError(absl::StrCat("chmod 0600 ", path), errno);
  }
  if (listen(fd->get(), 4) != 0) {
    return SysError(absl::StrCat("listen ", path), errno);
  }
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    return SysError(absl::StrCat("stat ", path), errno);
  }
  return SeqpacketListener(*std::move(fd), path, st.st_dev, st.st_ino);
}

absl::StatusOr<base::OwnedFd> AcceptSeqpacket(int listener,
                                              absl::Duration timeout,
                                              pid_t* peer) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    RAMFERRY_ASSIGN_OR_RETURN(
        bool ready, WaitFor(listener, POLLIN, deadline - absl::Now()));
    if (!ready) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "nobody connected within %s", absl::FormatDuration(timeout)));
    }
    base::OwnedFd fd(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
      return SysError("accept", errno);
    }
    RAMFERRY_ASSIGN_OR_RETURN(ucred cred, PeerCredentials(fd.get()));
    if (!Trusted(cred)) continue;  // not ours to serve
    if (peer != nullptr) *peer = cred.pid;
    return fd;
  }
}

absl::StatusOr<base::OwnedFd> ConnectSeqpacket(const std::string& path,
                                               absl::Duration timeout) {
  absl::StatusOr<sockaddr_un> a = Address(path);
  if (!a.ok()) return a.status();
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    absl::StatusOr<base::OwnedFd> fd = NewSocket();
    if (!fd.ok()) return fd.status();
    if (connect(fd->get(), reinterpret_cast<const sockaddr*>(&*a), sizeof *a) ==
        0) {
      RAMFERRY_ASSIGN_OR_RETURN(ucred cred, PeerCredentials(fd->get()));
      if (!Trusted(cred)) {
        return absl::PermissionDeniedError(absl::StrFormat(
            "the process listening at %s (pid %d) runs as uid %d, not as "
            "this process's uid %d or root: another user may have taken the "
            "path, so nothing was sent; put the socket in a directory only "
            "this user can write",
            path, cred.pid, cred.uid, geteuid()));
      }
      return fd;
    }
    const int err = errno;
    if ((err != ENOENT && err != ECONNREFUSED && err != EAGAIN) ||
        absl::Now() >= deadline) {
      return SysError(
          absl::StrCat("connect to ", path,
                       err == ENOENT || err == ECONNREFUSED
                           ? " (is the other process listening there?)"
                           : ""),
          err);
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

absl::StatusOr<PeerProcess> Peer(int fd) {
  RAMFERRY_ASSIGN_OR_RETURN(ucred cred, PeerCredentials(fd));
  if (cred.pid <= 0) {
    return absl::FailedPreconditionError(
        "the peer process lives in a pid namespace this process cannot see "
        "(the kernel reports its pid as 0), so it could not be paused or "
        "watched: run both in one pid namespace, or this one in an "
        "ancestor of the peer's");
  }
  PeerProcess peer{cred.pid, base::OwnedFd()};
  int pidfd = -1;
  socklen_t len = sizeof pidfd;
  if (getsockopt(fd, SOL_SOCKET, kSoPeerPidfd, &pidfd, &len) == 0) {
    peer.pidfd.Reset(pidfd);
  } else if (errno == ENOPROTOOPT) {
    peer.pidfd.Reset(static_cast<int>(syscall(SYS_pidfd_open, peer.pid, 0)));
    if (!peer.pidfd.valid()) {
      return SysError(absl::StrCat("pidfd_open of pid ", peer.pid), errno);
    }
  } else {
    return SysError("SO_PEERPIDFD", errno);
  }
  return peer;
}

absl::Status SignalPeer(const PeerProcess& peer, int signal) {
  if (syscall(SYS_pidfd_send_signal, peer.pidfd.get(), signal, nullptr, 0) !=
      0) {
    return SysError(absl::StrFormat("signal %d to pid %d", signal, peer.pid),
                    errno);
  }
  return absl::OkStatus();
}

absl::Status SendPacket(int fd, absl::Span<const uint8_t> bytes,
                        absl::Span<const int> fds) {
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  std::vector<uint8_t> control;
  if (!fds.empty()) {
    control.resize(CMSG_SPACE(sizeof(int) * fds.size()));
    m.msg_control = control.data();
    m.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    const ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(bytes.size())) return absl::OkStatus();
    if (n < 0 && errno == EINTR) continue;
    return SysError("sendmsg on the hand-off socket", n < 0 ? errno : EIO);
  }
}

absl::StatusOr<Packet> ReceivePacket(int fd, size_t max_bytes, size_t max_fds,
                                     absl::Duration timeout) {
  RAMFERRY_ASSIGN_OR_RETURN(bool ready, WaitFor(fd, POLLIN, timeout));
  if (!ready) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "the peer sent nothing within %s", absl::FormatDuration(timeout)));
  }
  Packet p;
  p.bytes.resize(max_bytes + 1);  // one more: a longer packet truncates
  std::vector<uint8_t> control(
      CMSG_SPACE(sizeof(int) * std::max<size_t>(max_fds, 1)));
  iovec iov{p.bytes.data(), p.bytes.size()};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control.data();
  m.msg_controllen = control.size();
  ssize_t n;
  do {
    n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return SysError("recvmsg on the hand-off socket", errno);
  // Take ownership of whatever came before judging the packet.
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int got;
      std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
      p.fds.emplace_back(got);
    }
  }
  if ((m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
      static_cast<size_t>(n) > max_bytes || p.fds.size() > max_fds) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hand-off message too large (%d bytes, %d descriptors; at most %d "
        "and %d)",
        n, p.fds.size(), max_bytes, max_fds));
  }
  p.bytes.resize(static_cast<size_t>(n));
  return p;
}

}  // namespace ramferry::handoff
