// A file descriptor closed when its owner goes: for the descriptors that
// travel between processes (handoff/unix_seqpacket.h) and every other
// descriptor the library holds for a while, where an early
// return must not leak one into a long-lived process.
#ifndef RAMFERRY_BASE_OWNED_FD_H_
#define RAMFERRY_BASE_OWNED_FD_H_

#include <unistd.h>

#include <utility>

namespace ramferry::base {

class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(OwnedFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& o) noexcept {
    if (this != &o) Reset(std::exchange(o.fd_, -1));
    return *this;
  }
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace ramferry::base

#endif  // RAMFERRY_BASE_OWNED_FD_H_
