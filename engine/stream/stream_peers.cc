#include "engine/stream/stream_peers.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/status_macros.h"
#include "base/status_util.h"
#include "engine/stream/stream_socket.h"
#include "proto/stream.h"
#include "proto/stream_control.h"

namespace ramferry::engine {

StreamPeers::StreamPeers(Connect connect, SendControl send, OnError on_error,
                         absl::Duration stall_timeout)
    : connect_(std::move(connect)),
      send_(std::move(send)),
      on_error_(std::move(on_error)),
      stall_timeout_(stall_timeout),
      sink_({.on_delivered =
                 [this](uint32_t stream, uint64_t delivered, bool ended) {
                   absl::Status s = send_(proto::EncodeStreamAck(
                       {.stream = stream, .offset = delivered, .end = ended}));
                   if (!s.ok()) on_error_(s);
                 },
             .on_error = [this](const absl::Status& s) { on_error_(s); }}) {}

StreamPeers::~StreamPeers() {
  Shutdown();
  // The list no longer changes once shut down.
  std::vector<Peer*> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& p : peers_) peers.push_back(p.get());
  }
  sink_.Join();  // its writers send on the sockets closed below
  for (Peer* p : peers) {
    if (p->reader.joinable()) p->reader.join();
    close(p->fd);
  }
}

absl::Status StreamPeers::Open(absl::Span<const uint8_t> payload) {
  RAMFERRY_ASSIGN_OR_RETURN(uint32_t stream, proto::DecodeStreamId(payload));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stream != peers_.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "STREAM_OPEN for stream %d; %d was next", stream, peers_.size()));
    }
  }
  if (!connect_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "stream %d: this destination has no peer to connect streams to "
        "(Receiver::OnStreamOpen was not set)",
        stream));
  }
  absl::StatusOr<int> fd = connect_(stream);
  if (!fd.ok()) {
    return base::Annotate(
        fd.status(),
        absl::StrFormat("stream %d: connecting the destination's peer",
                        stream));
  }
  const timeval stall = absl::ToTimeval(stall_timeout_);
  if (setsockopt(*fd, SOL_SOCKET, SO_SNDTIMEO, &stall, sizeof stall) != 0) {
    const int err = errno;
    close(*fd);
    return absl::InternalError(absl::StrFormat(
        "stream %d: %s", stream, base::ErrnoMessage(err, "SO_SNDTIMEO")));
  }
  Peer* peer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peers_.push_back(std::make_unique<Peer>());
    peer = peers_.back().get();
    peer->stream = stream;
    peer->fd = *fd;
    if (shut_down_) shutdown(peer->fd, SHUT_RDWR);
  }
  RAMFERRY_RETURN_IF_ERROR(sink_.Open(stream, peer->fd));
  peer->reader = std::thread([this, peer] { ReadBack(peer); });
  return send_(proto::EncodeStreamOpened(stream));
}

void StreamPeers::ReadBack(Peer* peer) {
  std::vector<uint8_t> buffer(proto::kMaxStreamBackBytes);
  while (true) {
    ssize_t n = ReadSome(peer->fd, absl::MakeSpan(buffer));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shut_down_) return;  // our own shutdown, not the peer's end
    }
    // A peer that took its whole stream and then closed with a reset
    // (QEMU's destination closes a multifd connection at the end without
    // reading our EOF) has ended, not failed.
    if (n == -ECONNRESET && sink_.ended(peer->stream)) n = 0;
    if (n < 0) {
      on_error_(absl::UnavailableError(absl::StrFormat(
          "stream %d: reading what its peer sends back: %s", peer->stream,
          base::ErrnoMessage(static_cast<int>(-n), "read"))));
      return;
    }
    const uint64_t at = peer->back.load(std::memory_order_relaxed);
    absl::Status s =
        n == 0
            ? send_(proto::EncodeStreamBackEnd(
                  {.stream = peer->stream, .length = at}))
            : send_(proto::EncodeStreamBack(
                  peer->stream, at,
                  absl::MakeConstSpan(buffer.data(), static_cast<size_t>(n))));
    if (!s.ok()) {
      on_error_(s);
      return;
    }
    if (n == 0) {
      peer->back_ended.store(true, std::memory_order_release);
      return;
    }
    peer->back.store(at + static_cast<uint64_t>(n), std::memory_order_relaxed);
  }
}

absl::Status StreamPeers::CheckEnded() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& p : peers_) {
    if (!sink_.ended(p->stream)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "FINISH before stream %d ended (%d bytes delivered): the source "
          "must await its streams",
          p->stream, sink_.delivered(p->stream)));
    }
  }
  return absl::OkStatus();
}

void StreamPeers::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    for (const auto& p : peers_) shutdown(p->fd, SHUT_RDWR);
  }
  sink_.Stop();
}

std::vector<StreamPeers::Counts> StreamPeers::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Counts> out;
  for (const auto& p : peers_) {
    out.push_back(
        {.stream = p->stream,
         .delivered = sink_.delivered(p->stream),
         .back = p->back.load(std::memory_order_relaxed),
         .ended = sink_.ended(p->stream),
         .back_ended = p->back_ended.load(std::memory_order_acquire)});
  }
  return out;
}

}  // namespace ramferry::engine
