#include "engine/stream/fd_stream_sink.h"

#include <errno.h>
#include <sys/socket.h>

#include <utility>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "engine/stream/stream_socket.h"

namespace ramferry::engine {

FdStreamSink::FdStreamSink() : FdStreamSink(Options{}) {}

FdStreamSink::FdStreamSink(Options options)
    : options_(std::move(options)),
      streams_(std::make_unique<Stream[]>(proto::kMaxStreams)) {}

FdStreamSink::~FdStreamSink() { Join(); }

void FdStreamSink::Join() {
  Stop();
  for (uint32_t i = 0; i < proto::kMaxStreams; ++i) {
    if (streams_[i].writer.joinable()) streams_[i].writer.join();
  }
}

void FdStreamSink::Stop() {
  stopped_.store(true, std::memory_order_release);
  for (uint32_t i = 0; i < proto::kMaxStreams; ++i) {
    Stream& s = streams_[i];
    std::unique_lock<std::mutex> lock(s.mu);  // a waiting writer rechecks
    s.cv.notify_all();
  }
}

absl::Status FdStreamSink::Open(uint32_t stream, int fd) {
  if (stream >= proto::kMaxStreams) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stream %d: streams are numbered below %d", stream,
                        proto::kMaxStreams));
  }
  Stream& s = streams_[stream];
  {
    std::unique_lock<std::mutex> lock(s.mu);
    if (s.cursor.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("stream %d is open already", stream));
    }
    s.fd = fd;
    s.cursor.emplace(stream);
  }
  s.writer = std::thread([this, stream] { Write(stream); });
  return absl::OkStatus();
}

absl::Status FdStreamSink::Take(const proto::StreamFrame& frame,
                                absl::Span<const uint8_t> payload) {
  if (frame.stream >= proto::kMaxStreams) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stream %d was never opened", frame.stream));
  }
  Stream& s = streams_[frame.stream];
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.cursor.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stream %d was never opened", frame.stream));
  }
  if (!s.failed.ok()) return s.failed;
  absl::StatusOr<absl::Span<const uint8_t>> fresh =
      s.cursor->Fresh(frame, payload);
  if (!fresh.ok()) return fresh.status();
  if (s.queued + fresh->size() > options_.max_queued) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stream %d: %d bytes queued for its peer and %d more came: the "
        "source sends past what was acknowledged",
        frame.stream, s.queued, fresh->size()));
  }
  if (!fresh->empty()) {
    s.queue.emplace_back(fresh->begin(), fresh->end());
    s.queued += fresh->size();
    s.cursor->Advance(fresh->size());
  }
  if (frame.end && !s.cursor->ended()) {
    s.cursor->End();
    s.end = true;
  } else if (frame.end && s.cursor->ended() && s.queue.empty() &&
             options_.on_delivered != nullptr &&
             s.ended.load(std::memory_order_acquire)) {
    // A resend of an end that went (its acknowledgement was lost with its
    // channel): say it again.
    options_.on_delivered(frame.stream, s.cursor->delivered(), true);
  }
  s.cv.notify_all();
  return absl::OkStatus();
}

void FdStreamSink::Fail(Stream& s, const absl::Status& status) {
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.failed = status;
    s.queue.clear();
    s.queued = 0;
  }
  if (options_.on_error != nullptr) options_.on_error(status);
}

FdStreamSink::Step FdStreamSink::NextStep(Stream& s,
                                          std::vector<uint8_t>* chunk) {
  std::unique_lock<std::mutex> lock(s.mu);
  // Stop() notifies under the lock after setting stopped_.
  s.cv.wait(lock, [&s, this] {
    return stopped_.load(std::memory_order_acquire) || !s.queue.empty() ||
           s.end;
  });
  if (stopped_.load(std::memory_order_acquire)) return Step::kStop;
  if (s.queue.empty()) return Step::kEnd;  // s.end, every byte sent
  *chunk = std::move(s.queue.front());
  s.queue.pop_front();
  return Step::kChunk;
}

bool FdStreamSink::SendChunk(uint32_t id, Stream& s, int fd,
                             const std::vector<uint8_t>& chunk) {
  uint64_t sent = 0;
  const int err = SendAll(fd, chunk, &sent);
  const uint64_t delivered = s.delivered.load() + sent;
  s.delivered.store(delivered, std::memory_order_release);
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.queued -= chunk.size();
  }
  if (err == EAGAIN || err == EWOULDBLOCK) {
    Fail(s, absl::DeadlineExceededError(absl::StrFormat(
                "stream %d: its peer took %d bytes and then read nothing "
                "for the stall timeout, nor closed",
                id, delivered)));
    return false;
  }
  if (err != 0) {
    if (!stopped_.load(std::memory_order_acquire)) {
      Fail(s, absl::UnavailableError(absl::StrFormat(
                  "stream %d: its peer took %d bytes and then refused "
                  "more: %s",
                  id, delivered, base::ErrnoMessage(err, "send"))));
    }
    return false;
  }
  return true;
}

void FdStreamSink::EndStream(uint32_t id, Stream& s, int fd) {
  // Before the peer can read its EOF: whoever saw it finds it ended.
  s.ended.store(true, std::memory_order_release);
  if (shutdown(fd, SHUT_WR) != 0) {
    Fail(s, absl::UnavailableError(
                absl::StrFormat("stream %d: ending it: %s", id,
                                base::ErrnoMessage(errno, "shutdown"))));
    return;
  }
  if (options_.on_delivered != nullptr) {
    options_.on_delivered(id, s.delivered.load(), true);
  }
}

void FdStreamSink::Write(uint32_t id) {
  Stream& s = streams_[id];
  int fd;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    fd = s.fd;
  }
  uint64_t told = 0;
  std::vector<uint8_t> chunk;
  while (true) {
    switch (NextStep(s, &chunk)) {
      case Step::kStop:
        return;
      case Step::kEnd:
        EndStream(id, s, fd);
        return;
      case Step::kChunk:
        break;
    }
    if (!SendChunk(id, s, fd, chunk)) return;
    const uint64_t delivered = s.delivered.load(std::memory_order_acquire);
    if (options_.on_delivered != nullptr &&
        delivered - told >= options_.ack_every) {
      told = delivered;
      options_.on_delivered(id, delivered, false);
    }
  }
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
