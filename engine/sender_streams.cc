// The source's carried streams (SessionOptions::streams,
// docs/streams.md): opening each on the destination in order, queueing
// what its reader takes from the peer on the stream's channel, writing
// back what the destination's peer sends, and (surviving channel loss)
// moving a lost channel's streams to a live one, resent from what the
// destination acknowledged.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/page_size.h"
#include "base/status_macros.h"
#include "engine/sender_impl.h"
#include "proto/stream.h"
#include "proto/stream_control.h"

namespace ramferry {
namespace {

// Each stream keeps at most this much read from its peer and not yet
// acknowledged: its window. Four packets' worth, so reads, sends and the
// destination's writes overlap, and its acknowledgement every MiB returns
// room before the window runs out.
constexpr uint64_t kStreamBacklogBytes =
    4 * uint64_t{proto::kMaxStreamPayloadBytes};
// Surviving channel loss: how often AwaitStreams declares the losses that
// came up while it waits.
constexpr absl::Duration kLossPoll = absl::Milliseconds(20);

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
  {
    std::lock_guard<std::mutex> lock(streams_.route_mu);
    auto channel = static_cast<uint32_t>(id % channels_.size());
    // Past channels already lost (surviving): the next live one.
    for (size_t i = 0; i < channels_.size() && losses_.lost(channel); ++i) {
      channel = static_cast<uint32_t>((channel + 1) % channels_.size());
    }
    streams_.route.push_back(channel);
  }
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

bool SenderImpl::PushStreamCommand(size_t channel,
                                   const engine::Command& command) {
  engine::CommandRing& ring = channels_[channel]->ring();
  engine::Command* c = ring.BeginPush();
  if (c == nullptr) return false;
  uint64_t* offsets = c->offsets;  // the ring's own
  *c = command;
  c->offsets = offsets;
  ring.CommitPush();
  return true;
}

bool SenderImpl::EnqueueStream(const engine::CarriedStream::Chunk& chunk) {
  engine::CarriedStream* stream = FindStream(chunk.stream);
  const engine::Command command{
      .type = chunk.end ? engine::CommandType::kStreamEnd
                        : engine::CommandType::kStream,
      .region = chunk.stream,
      .page_count = static_cast<uint32_t>(chunk.bytes.size()),
      .round = chunk.offset,
      .bytes = chunk.bytes.data(),
      .stream = stream};
  while (true) {
    uint32_t channel;
    {
      std::lock_guard<std::mutex> lock(streams_.route_mu);
      channel = streams_.route[chunk.stream];
    }
    {
      std::lock_guard<std::mutex> lock(*streams_.push_mu[channel]);
      // A resend on the stream's new channel took it already.
      if (stream->Covers(chunk)) return true;
      if (PushStreamCommand(channel, command)) return true;
    }
    // The ring was aborted: the session failed, or (surviving) the
    // channel was lost, and the stream moves once the loss is declared.
    if (!terms_.survive || failure_.failed()) return false;
    std::unique_lock<std::mutex> lock(streams_.route_mu);
    streams_.route_cv.wait(lock, [&] {
      return streams_.route[chunk.stream] != channel || failure_.failed();
    });
    if (failure_.failed()) return false;
  }
}

absl::Status SenderImpl::ResendStreams(uint32_t lost) {
  uint32_t to = lost;
  for (size_t i = 0; i < channels_.size() && losses_.lost(to); ++i) {
    to = static_cast<uint32_t>((to + 1) % channels_.size());
  }
  std::vector<engine::CarriedStream*> moving;
  {
    std::lock_guard<std::mutex> lock(streams_.route_mu);
    for (size_t s = 0; s < streams_.route.size(); ++s) {
      if (streams_.route[s] == lost) {
        moving.push_back(FindStream(static_cast<uint32_t>(s)));
      }
    }
  }
  for (engine::CarriedStream* stream : moving) {
    // Under the new channel's push lock: the resend goes first on it; a
    // reader's chunk that it covers is then dropped, one it does not goes
    // after it.
    std::lock_guard<std::mutex> push(*streams_.push_mu[to]);
    {
      std::lock_guard<std::mutex> lock(streams_.route_mu);
      streams_.route[stream->stream()] = to;
    }
    const engine::CarriedStream::Resend r = stream->TakeResend();
    uint64_t offset = r.from;
    for (absl::Span<const uint8_t> span : r.spans) {
      while (!span.empty()) {
        const size_t n =
            std::min<size_t>(span.size(), proto::kMaxStreamPayloadBytes);
        if (!PushStreamCommand(to, {.type = engine::CommandType::kStream,
                                    .region = stream->stream(),
                                    .page_count = static_cast<uint32_t>(n),
                                    .round = offset,
                                    .bytes = span.data(),
                                    .stream = stream})) {
          return FinalStatus();
        }
        offset += n;
        span.remove_prefix(n);
      }
    }
    if (r.end &&
        !PushStreamCommand(to, {.type = engine::CommandType::kStreamEnd,
                                .region = stream->stream(),
                                .round = r.length,
                                .stream = stream})) {
      return FinalStatus();
    }
    // Counted in pages, as a page session's resend is.
    losses_.AddResent((offset - r.from + base::kSmallPageSize - 1) /
                      base::kSmallPageSize);
  }
  std::lock_guard<std::mutex> lock(streams_.route_mu);
  streams_.route_cv.notify_all();
  return absl::OkStatus();
}

engine::CarriedStream* SenderImpl::FindStream(uint32_t stream) {
  std::lock_guard<std::mutex> lock(streams_.mu);
  return stream < streams_.list.size() ? streams_.list[stream].get() : nullptr;
}

absl::StatusOr<engine::CarriedStream*> SenderImpl::OpenedStream(
    uint32_t stream, const char* what) {
  engine::CarriedStream* s = FindStream(stream);
  if (s == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s for stream %d, which was never opened", what, stream));
  }
  return s;
}

absl::StatusOr<bool> SenderImpl::AwaitStreams(absl::Time deadline) {
  std::vector<engine::CarriedStream*> streams;
  {
    std::lock_guard<std::mutex> lock(streams_.mu);
    for (const auto& s : streams_.list) streams.push_back(s.get());
  }
  size_t done = 0;
  while (done < streams.size()) {
    // Losses are declared here, on the caller's thread, as between rounds.
    if (terms_.survive) RAMFERRY_RETURN_IF_ERROR(HandleLosses());
    const absl::Time slice =
        terms_.survive ? std::min(deadline, absl::Now() + kLossPoll) : deadline;
    if (streams[done]->WaitDone(slice)) {
      ++done;
      continue;
    }
    if (failure_.failed()) return FinalStatus();
    if (absl::Now() >= deadline) return false;
  }
  if (failure_.failed()) return FinalStatus();
  return true;
}

absl::Status SenderImpl::CheckStreamsEnded() {
  std::lock_guard<std::mutex> lock(streams_.mu);
  streams_.closed = true;
  for (const auto& s : streams_.list) {
    if (!s->done()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "stream %d has not ended both ways; Finish only once AwaitStreams "
          "returned true",
          s->stream()));
    }
  }
  return absl::OkStatus();
}

void SenderImpl::ShutdownStreams() {
  {
    std::lock_guard<std::mutex> lock(streams_.mu);
    for (const auto& s : streams_.list) s->Shutdown();
  }
  // A reader waiting for its stream to move wakes to the failure.
  std::lock_guard<std::mutex> lock(streams_.route_mu);
  streams_.route_cv.notify_all();
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
  RAMFERRY_ASSIGN_OR_RETURN(engine::CarriedStream * s,
                            OpenedStream(back.stream, "STREAM_BACK"));
  return s->Back(back);
}

absl::Status SenderImpl::OnStreamBackEnd(absl::Span<const uint8_t> payload) {
  RAMFERRY_ASSIGN_OR_RETURN(proto::StreamBackEnd end,
                            proto::DecodeStreamBackEnd(payload));
  RAMFERRY_ASSIGN_OR_RETURN(engine::CarriedStream * s,
                            OpenedStream(end.stream, "STREAM_BACK_END"));
  return s->BackEnd(end);
}

absl::Status SenderImpl::OnStreamAck(absl::Span<const uint8_t> payload) {
  RAMFERRY_ASSIGN_OR_RETURN(proto::StreamAck ack,
                            proto::DecodeStreamAck(payload));
  RAMFERRY_ASSIGN_OR_RETURN(engine::CarriedStream * s,
                            OpenedStream(ack.stream, "STREAM_ACK"));
  return s->Acked(ack.offset, ack.end);
}

void SenderImpl::AddStreamStats(SessionStats* stats) const {
  std::vector<uint32_t> route;
  {
    std::lock_guard<std::mutex> lock(streams_.route_mu);
    route = streams_.route;
  }
  std::lock_guard<std::mutex> lock(streams_.mu);
  for (const auto& s : streams_.list) {
    const engine::CarriedStream::Counts n = s->counts();
    stats->streams.push_back(
        {.stream = s->stream(),
         .channel = s->stream() < route.size() ? route[s->stream()] : 0,
         .forward_bytes = n.read,
         .sent_bytes = n.sent,
         .back_bytes = n.back,
         .forward_ended = n.end_sent,
         .back_ended = n.back_ended});
  }
}

}  // namespace ramferry
