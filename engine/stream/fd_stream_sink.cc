#include "engine/stream/fd_stream_sink.h"

#include <errno.h>
#include <sys/socket.h>

#include <utility>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "engine/stream/stream_socket.h"

namespace ramferry::engine {

FdStreamSink::FdStreamSink(OnDelivered on_delivered, uint64_t ack_every)
    : on_delivered_(std::move(on_delivered)),
      ack_every_(ack_every),
      streams_(std::make_unique<Stream[]>(proto::kMaxStreams)) {}

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
  const int err = SendAll(s.fd, *fresh, &sent);
  s.cursor->Advance(sent);
  s.delivered.store(s.cursor->delivered(), std::memory_order_release);
  if (err == EAGAIN || err == EWOULDBLOCK) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "stream %d: its peer took %d bytes and then read nothing for the "
        "stall timeout, nor closed",
        frame.stream, s.cursor->delivered()));
  }
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
    s.ended.store(true, std::memory_order_release);
  }
  const uint64_t delivered = s.cursor->delivered();
  if (on_delivered_ != nullptr &&
      (frame.end || delivered - s.told >= ack_every_)) {
    s.told = delivered;
    on_delivered_(frame.stream, delivered, s.cursor->ended());
  }
  return absl::OkStatus();
}

uint64_t FdStreamSink::delivered(uint32_t stream) const {
  if (stream >= proto::kMaxStreams) return 0;
  return streams_[stream].delivered.load(std::memory_order_acquire);
}

bool FdStreamSink::ended(uint32_t stream) const {
  if (stream >= proto::kMaxStreams) return false;
  return streams_[stream].ended.load(std::memory_order_acquire);
}

}  // namespace ramferry::engine
