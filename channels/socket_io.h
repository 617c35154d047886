// Blocking socket I/O that resumes short transfers, retries EINTR, and turns
// every failure into a status that says what was being done.
#ifndef RAMFERRY_CHANNELS_SOCKET_IO_H_
#define RAMFERRY_CHANNELS_SOCKET_IO_H_

#include <sys/uio.h>

#include <atomic>
#include <cstddef>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace ramferry::channels {

// Clears O_NONBLOCK (an fd released from Asio keeps the flag Asio set for
// its asynchronous operations; our channel loops block instead).
absl::Status MakeBlocking(int fd);

// Sets SO_SNDTIMEO and SO_RCVTIMEO so a blocked call wakes after `stall`.
absl::Status SetStallTimeouts(int fd, absl::Duration stall);
// TCP_NODELAY: a small message (a control frame, a page request) leaves
// at once, not held by Nagle until the one before it is acknowledged.
absl::Status SetNoDelay(int fd);

// Total bytes in an iovec array.
size_t IovBytes(absl::Span<const iovec> iov);

// Drops the first `n` bytes from `iov`; returns the spans that remain.
absl::Span<iovec> ConsumeIov(absl::Span<iovec> iov, size_t n);

struct SendHooks {
  // After each sendmsg call that took bytes (tells short sends apart).
  absl::FunctionRef<void(size_t bytes, bool partial)> on_call;
  // When sendmsg fails with ENOBUFS: make room (reap completions) and
  // return OK to retry, or return why it cannot.
  absl::FunctionRef<absl::Status()> on_no_buffers;
};

// Sends every byte of `iov` (which it edits as it goes) with sendmsg
// `flags`. A send that makes no progress for `stall` fails with
// DEADLINE_EXCEEDED. `stop`, when set, turns a failure into ABORTED.
absl::Status SendAll(int fd, absl::Span<iovec> iov, int flags,
                     absl::Duration stall, const std::atomic<bool>& stop,
                     const SendHooks& hooks);

// `idle_at` for a read with no packet boundary in it.
inline constexpr size_t kNoIdle = ~size_t{0};

// Reads exactly the bytes of `iov` (edited as it goes) with MSG_WAITALL.
// `idle_at`: once exactly this many bytes have arrived (a packet
// boundary: 0 before a header, a payload's end before the next header)
// the peer may be silent forever, and may close the connection cleanly;
// anywhere else `stall` without progress fails. Each recvmsg call is
// counted into *calls.
absl::Status ReadAll(int fd, absl::Span<iovec> iov, size_t idle_at,
                     absl::Duration stall, const std::atomic<bool>& stop,
                     size_t* calls);

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_SOCKET_IO_H_
