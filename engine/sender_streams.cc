// The source's carried streams (SessionOptions::streams,
// docs/streams.md): opening each on the destination in order, queueing
// what its reader takes from the peer on the stream's channel, and
// writing back what the destination's peer sends.
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "engine/sender_impl.h"
#include "proto/stream.h"
#include "proto/stream_control.h"

namespace ramferry {
namespace {

// Each stream keeps at most this much read from its peer and not yet sent:
// four packets' worth, so a read and a send overlap.
constexpr uint64_t kStreamBacklogBytes =
    4 * uint64_t{proto::kMaxStreamPayloadBytes};

}  // namespace

absl::StatusOr<uint32_t> SenderImpl::CarryStream(int fd) {
  if (!options_.streams) {
    close(fd);
    return absl::FailedPreconditionError(
        "CarryStream on a session without streams: set streams = true");
  }
  std::lock_guard<std::mutex> opening(streams_.open_mu);
  if (failure_.failed()) {
    close(fd);
    return FinalStatus();
  }
  engine::CarriedStream* stream;
  {
    std::lock_guard<std::mutex> lock(streams_.mu);
    if (streams_.list.size() >= proto::kMaxStreams || streams_.closed) {
      close(fd);
      return absl::ResourceExhaustedError(absl::StrFormat(
          "a session carries at most %d streams, and none once it finishes",
          proto::kMaxStreams));
    }
    const auto id = static_cast<uint32_t>(streams_.list.size());
    streams_.list.push_back(
        std::make_unique<engine::CarriedStream>(id, fd, kStreamBacklogBytes));
    stream = streams_.list.back().get();
  }
  const uint32_t id = stream->stream();
  // The destination connects its peer before this end reads a byte: its
  // peer takes connections in the order they come (QEMU's main first).
  if (absl::Status s = control_->Send(proto::EncodeStreamOpen(id)); !s.ok()) {
    failure_.Fail(s);
    return FinalStatus();
  }
  RAMFERRY_RETURN_IF_ERROR(AwaitControl(
      [&] { return streams_.opened > id; }, options_.handshake_timeout,
      absl::StrFormat("opening stream %d", id)));
  stream->Start(
      [this](const engine::CarriedStream::Chunk& c) {
        return EnqueueStream(c);
      },
      [this](const absl::Status& s) { failure_.Fail(s); });
  return id;
}

bool SenderImpl::EnqueueStream(const engine::CarriedStream::Chunk& chunk) {
  const size_t channel = chunk.stream % channels_.size();
  std::lock_guard<std::mutex> lock(*streams_.push_mu[channel]);
  engine::CommandRing& ring = channels_[channel]->ring();
  engine::Command* c = ring.BeginPush();
  if (c == nullptr) return false;
  c->type = chunk.end ? engine::CommandType::kStreamEnd
                      : engine::CommandType::kStream;
  c->region = chunk.stream;
  c->round = chunk.offset;
  c->page_count = static_cast<uint32_t>(chunk.bytes.size());
  c->barrier_seq = 0;
  c->bytes = chunk.bytes.data();
  c->stream = FindStream(chunk.stream);
  ring.CommitPush();
  return true;
}

engine::CarriedStream* SenderImpl::FindStream(uint32_t stream) {
  std::lock_guard<std::mutex> lock(streams_.mu);
  return stream < streams_.list.size() ? streams_.list[stream].get() : nullptr;
}

absl::StatusOr<bool> SenderImpl::AwaitStreams(absl::Time deadline) {
  std::vector<engine::CarriedStream*> streams;
  {
    std::lock_guard<std::mutex> lock(streams_.mu);
    for (const auto& s : streams_.list) streams.push_back(s.get());
  }
  for (engine::CarriedStream* s : streams) {
    if (!s->WaitDone(deadline)) {
      if (failure_.failed()) return FinalStatus();
      return false;
    }
  }
  if (failure_.failed()) return FinalStatus();
  return true;
}

absl::Status SenderImpl::CheckStreamsEnded() {
  std::lock_guard<std::mutex> lock(streams_.mu);
  streams_.closed = true;
  for (const auto& s : streams_.list) {
    const engine::CarriedStream::Counts n = s->counts();
    if (!n.end_sent || !n.back_ended) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "stream %d has not ended (%s); Finish only once AwaitStreams "
          "returned OK",
          s->stream(),
          !n.end_sent ? "its peer is still sending"
                      : "the destination's peer has not closed its side"));
    }
  }
  return absl::OkStatus();
}

void SenderImpl::ShutdownStreams() {
  std::lock_guard<std::mutex> lock(streams_.mu);
  for (const auto& s : streams_.list) s->Shutdown();
}

absl::Status SenderImpl::OnStreamOpened(absl::Span<const uint8_t> payload) {
  RAMFERRY_ASSIGN_OR_RETURN(uint32_t id, proto::DecodeStreamId(payload));
  std::unique_lock<std::mutex> lock(events_.mu);
  if (id != streams_.opened || FindStream(id) == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "STREAM_OPENED for stream %d; %d was next", id, streams_.opened));
  }
  ++streams_.opened;
  events_.cv.notify_all();
  return absl::OkStatus();
}

absl::Status SenderImpl::OnStreamBack(absl::Span<const uint8_t> payload) {
  RAMFERRY_ASSIGN_OR_RETURN(proto::StreamBack back,
                            proto::DecodeStreamBack(payload));
  engine::CarriedStream* s = FindStream(back.stream);
  if (s == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "STREAM_BACK for stream %d, which was never opened", back.stream));
  }
  return s->Back(back);
}

absl::Status SenderImpl::OnStreamBackEnd(absl::Span<const uint8_t> payload) {
  RAMFERRY_ASSIGN_OR_RETURN(proto::StreamBackEnd end,
                            proto::DecodeStreamBackEnd(payload));
  engine::CarriedStream* s = FindStream(end.stream);
  if (s == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "STREAM_BACK_END for stream %d, which was never opened", end.stream));
  }
  return s->BackEnd(end);
}

void SenderImpl::AddStreamStats(SessionStats* stats) const {
  std::lock_guard<std::mutex> lock(streams_.mu);
  for (const auto& s : streams_.list) {
    const engine::CarriedStream::Counts n = s->counts();
    stats->streams.push_back(
        {.stream = s->stream(),
         .channel = static_cast<uint32_t>(s->stream() % channels_.size()),
         .forward_bytes = n.read,
         .sent_bytes = n.sent,
         .back_bytes = n.back,
         .forward_ended = n.end_sent,
         .back_ended = n.back_ended});
  }
}

}  // namespace ramferry
