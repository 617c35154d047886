// The socket calls both ends of a carried stream make on their peer's
// connection (QEMU's): whole sends that never raise SIGPIPE, and reads
// that retry an interrupted call.
#ifndef RAMFERRY_ENGINE_STREAM_STREAM_SOCKET_H_
#define RAMFERRY_ENGINE_STREAM_STREAM_SOCKET_H_

#include <sys/types.h>

#include <cstdint>

#include "absl/types/span.h"

namespace ramferry::engine {

// Sends all of `bytes` on socket `fd` (a closed peer is EPIPE, never
// SIGPIPE), adding what went to *sent; the errno of the first failure, or
// 0.
int SendAll(int fd, absl::Span<const uint8_t> bytes, uint64_t* sent);

// One read(2) into `into`, retried on EINTR: the bytes read, 0 at the end
// of the stream, or -errno.
ssize_t ReadSome(int fd, absl::Span<uint8_t> into);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_STREAM_STREAM_SOCKET_H_
