#include "engine/stream/carried_stream.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "engine/stream/stream_socket.h"
#include "proto/stream.h"

namespace ramferry::engine {

CarriedStream::CarriedStream(uint32_t stream, int fd, uint64_t capacity)
    : stream_(stream), fd_(fd), backlog_(capacity) {}

CarriedStream::~CarriedStream() {
  Shutdown();
  JoinReader();
  close(fd_);
}

void CarriedStream::JoinReader() {
  if (reader_.joinable()) reader_.join();
}

void CarriedStream::Start(Enqueue enqueue, OnError on_error) {
  enqueue_ = std::move(enqueue);
  on_error_ = std::move(on_error);
  reader_ = std::thread([this] { Run(); });
}

void CarriedStream::Shutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!stopped_) {
    stopped_ = true;
    shutdown(fd_, SHUT_RDWR);
  }
  cv_.notify_all();
}

absl::Span<uint8_t> CarriedStream::WaitRoom() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return stopped_ || backlog_.room() > 0; });
  if (stopped_) return {};
  return backlog_.Writable(proto::kMaxStreamPayloadBytes);
}

void CarriedStream::Run() {
  while (true) {
    absl::Span<uint8_t> room = WaitRoom();
    if (room.empty()) return;
    // Outside the lock: the channel reads only bytes before `room`.
    const ssize_t n = ReadSome(fd_, room);
    Chunk chunk{.stream = stream_};
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopped_) return;
      if (n < 0) {
        stopped_ = true;
        cv_.notify_all();
      } else {
        chunk.offset = backlog_.end();
        chunk.bytes = room.first(static_cast<size_t>(n));
        chunk.end = n == 0;
        eof_read_ |= chunk.end;
        // Within Writable's span: cannot fail.
        (void)backlog_.Commit(static_cast<uint64_t>(n));
        counts_.read += static_cast<uint64_t>(n);
      }
    }
    if (n < 0) {
      on_error_(absl::UnavailableError(
          absl::StrFormat("stream %d: reading from its peer: %s", stream_,
                          base::ErrnoMessage(static_cast<int>(-n), "read"))));
      return;
    }
    if (!enqueue_(chunk) || chunk.end) return;
  }
}

void CarriedStream::Sent(uint64_t end) {
  std::unique_lock<std::mutex> lock(mu_);
  counts_.sent = std::max(counts_.sent, end);
}

absl::Status CarriedStream::Acked(uint64_t offset, bool end) {
  std::unique_lock<std::mutex> lock(mu_);
  if (offset > backlog_.end() ||
      (end && (!eof_read_ || offset != backlog_.end()))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "STREAM_ACK for stream %d to offset %d%s, where %d bytes were read%s",
        stream_, offset, end ? " and its end" : "", backlog_.end(),
        eof_read_ ? " and the end" : ""));
  }
  (void)backlog_.Ack(offset);  // at most end(): checked above
  counts_.acked = std::max(counts_.acked, offset);
  counts_.end_acked |= end;
  cv_.notify_all();  // room, or the end
  return absl::OkStatus();
}

CarriedStream::Resend CarriedStream::TakeResend() {
  std::unique_lock<std::mutex> lock(mu_);
  Resend r;
  r.from = backlog_.acked();
  // From acked() to end(): cannot fail.
  r.spans = *backlog_.Since(r.from);
  r.length = backlog_.end();
  r.end = eof_read_ && !counts_.end_acked;
  resent_end_ = backlog_.end();
  end_resent_ = eof_read_;
  return r;
}

bool CarriedStream::Covers(const Chunk& chunk) const {
  std::unique_lock<std::mutex> lock(mu_);
  return chunk.end ? end_resent_ : chunk.offset < resent_end_;
}

bool CarriedStream::done() const {
  std::unique_lock<std::mutex> lock(mu_);
  return DoneLocked();
}

bool CarriedStream::DoneLocked() const {
  return counts_.end_acked && counts_.back_ended;
}

void CarriedStream::EndSent() {
  std::unique_lock<std::mutex> lock(mu_);
  counts_.end_sent = true;
}

absl::Status CarriedStream::Back(const proto::StreamBack& back) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (counts_.back_ended || back.offset != counts_.back) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "STREAM_BACK for stream %d at offset %d, where %d bytes came back "
          "so far%s",
          stream_, back.offset, counts_.back,
          counts_.back_ended ? " and its end" : ""));
    }
  }
  // The control thread writes alone; the lock is not held through a
  // send the peer may block.
  uint64_t sent = 0;
  const int err = SendAll(fd_, back.bytes, &sent);
  std::unique_lock<std::mutex> lock(mu_);
  counts_.back += sent;
  if (err != 0) {
    return absl::UnavailableError(absl::StrFormat(
        "stream %d: its peer took %d bytes back and then refused more: %s",
        stream_, counts_.back, base::ErrnoMessage(err, "send")));
  }
  return absl::OkStatus();
}

absl::Status CarriedStream::BackEnd(const proto::StreamBackEnd& end) {
  std::unique_lock<std::mutex> lock(mu_);
  if (counts_.back_ended || end.length != counts_.back) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "STREAM_BACK_END for stream %d at %d bytes, where %d came back%s",
        stream_, end.length, counts_.back,
        counts_.back_ended ? " and its end" : ""));
  }
  counts_.back_ended = true;
  cv_.notify_all();
  // A peer that left already has nothing to be told.
  if (!stopped_) shutdown(fd_, SHUT_WR);
  return absl::OkStatus();
}

bool CarriedStream::WaitDone(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, absl::ToChronoTime(deadline),
                 [this] { return stopped_ || DoneLocked(); });
  return DoneLocked();
}

CarriedStream::Counts CarriedStream::counts() const {
  std::unique_lock<std::mutex> lock(mu_);
  return counts_;
}

}  // namespace ramferry::engine
