#include "engine/control.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/status_util.h"
#include "proto/auth.h"
#include "proto/wire.h"

namespace ramferry::engine {
using channels::PollUntil;
using channels::ReadWithDeadline;
using channels::WriteWithDeadline;

proto::SessionId NewSessionId() {
  proto::SessionId id;
  while (id.is_zero()) {
    size_t got = 0;
    while (got < id.bytes.size()) {
      ssize_t n = getrandom(id.bytes.data() + got, id.bytes.size() - got, 0);
      if (n > 0) got += static_cast<size_t>(n);
    }
  }
  return id;
}

ControlChannel::ControlChannel(int fd, absl::Duration send_timeout)
    : fd_(fd), send_timeout_(send_timeout) {}

ControlChannel::~ControlChannel() { close(fd_); }

bool ControlChannel::AcquireSend(absl::Duration wait) {
  std::unique_lock<std::mutex> lock(send_mu_);
  auto free = [&] { return !sending_; };
  if (wait == absl::InfiniteDuration()) {
    send_free_.wait(lock, free);
  } else if (!send_free_.wait_for(lock, absl::ToChronoNanoseconds(wait),
                                  free)) {
    return false;
  }
  sending_ = true;
  return true;
}

void ControlChannel::ReleaseSend() {
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    sending_ = false;
  }
  send_free_.notify_one();
}

absl::Status ControlChannel::Send(absl::Span<const uint8_t> frame) {
  // A send in progress ends within its own deadline, so this wait is
  // bounded too.
  AcquireSend(absl::InfiniteDuration());
  absl::Status s =
      shut_down_.load(std::memory_order_acquire)
          ? absl::AbortedError("control channel is shut down")
          : base::Annotate(WriteWithDeadline(fd_, WireFrame(frame),
                                             absl::Now() + send_timeout_),
                           "control channel");
  ReleaseSend();
  return s;
}

void ControlChannel::TrySend(absl::Span<const uint8_t> frame,
                             absl::Duration timeout) {
  // Waits out a short send (a heartbeat) but not a blocked one.
  const absl::Time deadline = absl::Now() + timeout;
  if (!AcquireSend(timeout)) return;
  if (!shut_down_.load(std::memory_order_acquire)) {
    WriteWithDeadline(fd_, WireFrame(frame), deadline).IgnoreError();
  }
  ReleaseSend();
}

absl::StatusOr<ControlChannel::Message> ControlChannel::Receive(
    absl::Time deadline) {
  uint8_t head[proto::kFrameHeaderBytes];
  if (absl::Status s = ReadWithDeadline(fd_, absl::MakeSpan(head), deadline);
      !s.ok()) {
    return base::Annotate(s, "control channel");
  }
  absl::StatusOr<proto::FrameHeader> h = proto::DecodeFrameHeader(head);
  if (!h.ok()) return base::Annotate(h.status(), "control channel");
  Message m{h->type, std::vector<uint8_t>(h->length)};
  if (absl::Status s =
          ReadWithDeadline(fd_, absl::MakeSpan(m.payload), deadline);
      !s.ok()) {
    return base::Annotate(s, absl::StrFormat("control channel, reading %s",
                                             proto::ControlTypeName(h->type)));
  }
  if (receive_sealer_ != nullptr) {
    RAMFERRY_RETURN_IF_ERROR(OpenFrame(&m, head, deadline));
  }
  return m;
}

void ControlChannel::Seal(std::unique_ptr<proto::Sealer> send,
                          std::unique_ptr<proto::Sealer> receive) {
  send_sealer_ = std::move(send);
  receive_sealer_ = std::move(receive);
}

absl::Span<const uint8_t> ControlChannel::WireFrame(
    absl::Span<const uint8_t> frame) {
  if (send_sealer_ == nullptr) return frame;
  const size_t head = proto::kFrameHeaderBytes;
  sealed_out_.resize(frame.size() + proto::kSealTagBytes);
  std::memcpy(sealed_out_.data(), frame.data(), head);
  send_sealer_->Begin(sent_frames_++);
  send_sealer_->Associate(frame.subspan(0, head));
  send_sealer_->SealBody(frame.data() + head, sealed_out_.data() + head,
                         frame.size() - head);
  absl::StatusOr<proto::SealTag> tag = send_sealer_->FinishSeal();
  // Only a failing libcrypto gets here; a tag of zeros fails at the peer,
  // which ends the session there with the cause.
  if (tag.ok()) {
    std::memcpy(sealed_out_.data() + frame.size(), tag->data(), tag->size());
  }
  return sealed_out_;
}

absl::Status ControlChannel::OpenFrame(Message* m,
                                       absl::Span<const uint8_t> head,
                                       absl::Time deadline) {
  proto::SealTag tag;
  if (absl::Status s = ReadWithDeadline(fd_, absl::MakeSpan(tag), deadline);
      !s.ok()) {
    return base::Annotate(
        s, absl::StrFormat("control channel, reading the tag of %s",
                           proto::ControlTypeName(m->type)));
  }
  const uint64_t number = received_frames_++;
  receive_sealer_->Begin(number);
  receive_sealer_->Associate(head);
  receive_sealer_->OpenBody(m->payload.data(), m->payload.size());
  if (!receive_sealer_->FinishOpen(tag)) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "control channel: message %d (%s) failed its authentication tag: "
        "the stream was altered, injected, replayed or reordered on the way",
        number, proto::ControlTypeName(m->type)));
  }
  return absl::OkStatus();
}

bool ControlChannel::WaitReadable(absl::Duration timeout) {
  return PollUntil(fd_, POLLIN, absl::Now() + timeout, "control channel").ok();
}

bool ControlChannel::Readable() const {
  pollfd p{fd_, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

void ControlChannel::Shutdown() {
  shut_down_.store(true, std::memory_order_release);
  ::shutdown(fd_, SHUT_RDWR);
}

absl::StatusOr<std::vector<uint8_t>> ReceiveExpected(ControlChannel& channel,
                                                     proto::ControlType type,
                                                     absl::Time deadline) {
  absl::StatusOr<ControlChannel::Message> m = channel.Receive(deadline);
  // A peer's heartbeats may come between a request and its reply.
  while (m.ok() && m->type == proto::ControlType::kHeartbeat &&
         m->payload.empty()) {
    m = channel.Receive(deadline);
  }
  if (!m.ok()) return m.status();
  if (m->type == proto::ControlType::kError) {
    RAMFERRY_ASSIGN_OR_RETURN(proto::ErrorMessage e,
                              proto::DecodeError(m->payload));
    return proto::ErrorMessageStatus(e);
  }
  if (m->type != type) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "control channel: expected %s, got %s", proto::ControlTypeName(type),
        proto::ControlTypeName(m->type)));
  }
  return std::move(m->payload);
}

}  // namespace ramferry::engine
