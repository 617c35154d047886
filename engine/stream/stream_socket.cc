#include "engine/stream/stream_socket.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ramferry::engine {

int SendAll(int fd, absl::Span<const uint8_t> bytes, uint64_t* sent) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
    *sent += static_cast<uint64_t>(n);
  }
  return 0;
}

ssize_t ReadSome(int fd, absl::Span<uint8_t> into) {
  while (true) {
    const ssize_t n = read(fd, into.data(), into.size());
    if (n >= 0) return n;
    if (errno != EINTR) return -errno;
  }
}

}  // namespace ramferry::engine
