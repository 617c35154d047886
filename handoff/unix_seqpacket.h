// Unix SOCK_SEQPACKET sockets that carry file descriptors: one message a
// packet (no framing to get wrong), descriptors as SCM_RIGHTS, the peer's
// credentials checked on every accepted connection. For the memory
// hand-off (ramferry/memory_handoff.h), between processes of one machine.
#ifndef RAMFERRY_HANDOFF_UNIX_SEQPACKET_H_
#define RAMFERRY_HANDOFF_UNIX_SEQPACKET_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/owned_fd.h"

namespace ramferry::handoff {

// A listening socket and the path it is bound at, which it removes when
// it closes, but only while the file there is still the one its bind made:
// a process that took the path over since (removed it and bound its own)
// keeps it.
class SeqpacketListener {
 public:
  SeqpacketListener() = default;
  SeqpacketListener(base::OwnedFd fd, std::string path, dev_t dev, ino_t ino)
      : fd_(std::move(fd)), path_(std::move(path)), dev_(dev), ino_(ino) {}
  SeqpacketListener(SeqpacketListener&& o) noexcept = default;
  SeqpacketListener& operator=(SeqpacketListener&& o) noexcept {
    if (this != &o) {
      Close();
      fd_ = std::move(o.fd_);
      path_ = std::move(o.path_);
      dev_ = o.dev_;
      ino_ = o.ino_;
    }
    return *this;
  }
  ~SeqpacketListener() { Close(); }

  int get() const { return fd_.get(); }
  bool valid() const { return fd_.valid(); }
  void Close();

 private:
  base::OwnedFd fd_;
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

// Binds `path` (mode 0600) and listens. A socket file left behind by a
// process that is gone is replaced; one that still answers is not.
absl::StatusOr<SeqpacketListener> ListenSeqpacket(const std::string& path);

// Waits up to `timeout` for a connection from a process of this user (or
// root); others are refused and closed. *peer gets its pid. A timeout is
// DEADLINE_EXCEEDED.
absl::StatusOr<base::OwnedFd> AcceptSeqpacket(int listener,
                                              absl::Duration timeout,
                                              pid_t* peer);

// Connects to `path`, retrying while it does not exist or refuses, until
// `timeout`, and checks who listens there, as AcceptSeqpacket checks who
// connects: a process of this user, or root. Another user who bound the
// path first (a shared /tmp) is refused before a byte is exchanged.
absl::StatusOr<base::OwnedFd> ConnectSeqpacket(const std::string& path,
                                               absl::Duration timeout);

// The process at the other end of a connection: its pid, as this process
// numbers it, and a pidfd of it, which names that process for good where
// the number may be reused once it exits. Taken from the connection
// (SO_PEERPIDFD, Linux 6.5); on an older kernel, pidfd_open of the pid
// SO_PEERCRED recorded, which could name a newer process only if the peer
// exited and its pid was reused in between. Refuses a peer whose pid is 0:
// it lives in a pid namespace this process cannot see, where no signal or
// /proc path of ours could reach it.
struct PeerProcess {
  pid_t pid = 0;
  base::OwnedFd pidfd;
};
absl::StatusOr<PeerProcess> Peer(int fd);

// Sends `signal` (0: none, only whether it lives) to the process `pidfd`
// names; ESRCH once it has exited.
absl::Status SignalPeer(const PeerProcess& peer, int signal);

absl::Status SendPacket(int fd, absl::Span<const uint8_t> bytes,
                        absl::Span<const int> fds = {});

struct Packet {
  std::vector<uint8_t> bytes;  // empty: the peer closed the connection
  std::vector<base::OwnedFd> fds;
};
// Receives one packet of at most `max_bytes` with at most `max_fds`
// descriptors, waiting up to `timeout` (DEADLINE_EXCEEDED). A packet that
// did not fit is an error, and what came with it is closed.
absl::StatusOr<Packet> ReceivePacket(int fd, size_t max_bytes, size_t max_fds,
                                     absl::Duration timeout);

}  // namespace ramferry::handoff

#endif  // RAMFERRY_HANDOFF_UNIX_SEQPACKET_H_
