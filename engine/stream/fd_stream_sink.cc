#include "engine/stream/fd_stream_sink.h"

#include <errno.h>
#include <sys/socket.h>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"

namespace ramferry::engine {
namespace {

// Sends all of `bytes` on socket `fd` (a closed peer is EPIPE, never
// SIGPIPE), adding what went to *sent; the errno of the first failure, or
// 0.
int WriteAll(int fd, absl::Span<const uint8_t> bytes, uint64_t* sent) {
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

}  // namespace

FdStreamSink::FdStreamSink()
    : streams_(std::make_unique<Stream[]>(proto::kMaxStreams)) {}

absl::Status FdStreamSink::Open(uint32_t stream, int fd) {
  if (stream >= proto::kMaxStreams) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stream %d: streams are numbered below %d", stream,
                        proto::kMaxStreams));
  }
  Stream& s = streams_[stream];
  absl::MutexLock lock(&s.mu);
  if (s.cursor.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stream %d is open already", stream));
  }
  s.fd = fd;
  s.cursor.emplace(stream);
  return absl::OkStatus();
}

absl::Status FdStreamSink::Take(const proto::StreamFrame& frame,
                                absl::Span<const uint8_t> payload) {
  if (frame.stream >= proto::kMaxStreams) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stream %d was never opened", frame.stream));
  }
  Stream& s = streams_[frame.stream];
  absl::MutexLock lock(&s.mu);
  if (!s.cursor.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stream %d was never opened", frame.stream));
  }
  absl::StatusOr<absl::Span<const uint8_t>> fresh =
      s.cursor->Fresh(frame, payload);
  if (!fresh.ok()) return fresh.status();
  // Counted as delivered only once sent: a resend brings the rest.
  uint64_t sent = 0;
  const int err = WriteAll(s.fd, *fresh, &sent);
  s.cursor->Advance(sent);
  if (err != 0) {
    return absl::UnavailableError(absl::StrFormat(
        "stream %d: its peer took %d bytes and then refused more: %s",
        frame.stream, s.cursor->delivered(), base::ErrnoMessage(err, "send")));
  }
  if (frame.end && !s.cursor->ended()) {
    if (shutdown(s.fd, SHUT_WR) != 0) {
      return absl::UnavailableError(
          absl::StrFormat("stream %d: ending it: %s", frame.stream,
                          base::ErrnoMessage(errno, "shutdown")));
    }
    s.cursor->End();
  }
  return absl::OkStatus();
}

uint64_t FdStreamSink::delivered(uint32_t stream) const {
  if (stream >= proto::kMaxStreams) return 0;
  const Stream& s = streams_[stream];
  absl::MutexLock lock(&s.mu);
  return s.cursor.has_value() ? s.cursor->delivered() : 0;
}

bool FdStreamSink::ended(uint32_t stream) const {
  if (stream >= proto::kMaxStreams) return false;
  const Stream& s = streams_[stream];
  absl::MutexLock lock(&s.mu);
  return s.cursor.has_value() && s.cursor->ended();
}

}  // namespace ramferry::engine
