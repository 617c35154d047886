// The control thread: reads the destination's messages, one handler per
// message type, until the session ends.
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/status_util.h"
#include "engine/sender_impl.h"

namespace ramferry {

using base::Annotate;
using engine::ControlChannel;

void SenderImpl::ControlLoop() {
  while (true) {
    // The destination beats every stall_timeout / 4; silence this long
    // means it is stopped or hung, whatever its sockets say.
    absl::StatusOr<ControlChannel::Message> m =
        control_->Receive(absl::Now() + options_.stall_timeout);
    if (!m.ok() && m.status().code() == absl::StatusCode::kDeadlineExceeded) {
      failure_.Fail(absl::DeadlineExceededError(absl::StrFormat(
          "destination stalled: no control message, not even a heartbeat, "
          "for %s",
          absl::FormatDuration(options_.stall_timeout))));
      return;
    }
    if (!m.ok()) {
      OnControlClosed(m.status());
      return;
    }
    if (absl::Status bad = Dispatch(*m); !bad.ok()) {
      failure_.Fail(Annotate(bad, "control connection"));
      return;
    }
  }
}

void SenderImpl::OnControlClosed(const absl::Status& cause) {
  bool expected;
  {
    std::unique_lock<std::mutex> lock(events_.mu);
    expected = events_.finish_acked;
  }
  // Recorded before events_.control_closed wakes a waiting caller, so the
  // caller reports this cause rather than a bare "control connection
  // closed" of its own.
  if (!expected) {
    failure_.Fail(absl::UnavailableError(absl::StrCat(
        "lost the control connection to the destination: ", cause.message())));
  }
  std::unique_lock<std::mutex> lock(events_.mu);
  events_.control_closed = true;
  events_.cv.notify_all();
}

absl::Status SenderImpl::Dispatch(const ControlChannel::Message& m) {
  switch (m.type) {
    case proto::ControlType::kRoundDone:
      return OnRoundDone(m.payload);
    case proto::ControlType::kHeartbeat:
      return proto::DecodeEmpty(m.type, m.payload);
    case proto::ControlType::kFinishAck:
      return OnFinishAck(m);
    case proto::ControlType::kVerifyResult:
      return OnVerifyResult(m.payload);
    case proto::ControlType::kChannelLost:
      return OnChannelLost(m);
    case proto::ControlType::kChannelGoneAck:
      return OnChannelGoneAck(m.payload);
    case proto::ControlType::kError:
      return OnPeerError(m.payload);
    case proto::ControlType::kPostcopyArmed:
    case proto::ControlType::kPostcopyComplete: {
      RAMFERRY_RETURN_IF_ERROR(proto::DecodeEmpty(m.type, m.payload));
      std::unique_lock<std::mutex> lock(events_.mu);
      if (m.type == proto::ControlType::kPostcopyArmed
              ? !postcopy_.may_arm()
              : !events_.postcopy_armed) {
        return absl::InvalidArgumentError(absl::StrCat(
            proto::ControlTypeName(m.type), " out of turn (no switch yet)"));
      }
      (m.type == proto::ControlType::kPostcopyArmed
           ? events_.postcopy_armed
           : events_.postcopy_complete) = true;
      events_.cv.notify_all();
      return absl::OkStatus();
    }
    case proto::ControlType::kPageRequest:
      return postcopy_.OnPageRequest(m.payload);
    case proto::ControlType::kMissingPages:
      return postcopy_.OnResumeMissing(m.payload);
    case proto::ControlType::kStreamOpened:
      return OnStreamOpened(m.payload);
    case proto::ControlType::kStreamBack:
      return OnStreamBack(m.payload);
    case proto::ControlType::kStreamBackEnd:
      return OnStreamBackEnd(m.payload);
    case proto::ControlType::kStreamAck:
      return OnStreamAck(m.payload);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected control message ",
                       proto::ControlTypeName(m.type), " from destination"));
  }
}

absl::Status SenderImpl::OnRoundDone(absl::Span<const uint8_t> payload) {
  absl::StatusOr<proto::RoundDone> d = proto::DecodeRoundDone(payload);
  if (!d.ok()) return d.status();
  std::unique_lock<std::mutex> lock(events_.mu);
  if (d->round != events_.confirmed_rounds) {
    return absl::InvalidArgumentError(
        absl::StrFormat("destination confirmed round %d; round %d was next",
                        d->round, events_.confirmed_rounds));
  }
  events_.confirmed_rounds = d->round + 1;
  events_.confirmed_pages.push_back(d->pages);
  events_.confirmed_mirror.store(events_.confirmed_rounds,
                                 std::memory_order_release);
  events_.cv.notify_all();
  return absl::OkStatus();
}

absl::Status SenderImpl::OnFinishAck(const ControlChannel::Message& m) {
  absl::Status bad = proto::DecodeEmpty(m.type, m.payload);
  std::unique_lock<std::mutex> lock(events_.mu);
  // The destination sends no confirmation after its ERROR (it sends that
  // only before its commit point): one read after an ERROR is not the
  // destination's, and the ERROR before it stands (RefusedBeforeConfirmed),
  // however the caller's wait and this reader interleave.
  if (events_.peer_error.has_value()) {
    return absl::InvalidArgumentError(
        "FINISH_ACK after the destination's ERROR: not its confirmation");
  }
  events_.finish_acked = true;
  events_.cv.notify_all();
  return bad;
}

absl::Status SenderImpl::OnVerifyResult(absl::Span<const uint8_t> payload) {
  RAMFERRY_ASSIGN_OR_RETURN(proto::VerifyResult v,
                            proto::DecodeVerifyResult(payload));
  std::unique_lock<std::mutex> lock(events_.mu);
  events_.verify_results.push_back(std::move(v));
  events_.cv.notify_all();
  return absl::OkStatus();
}

absl::Status SenderImpl::OnChannelLost(const ControlChannel::Message& m) {
  RAMFERRY_ASSIGN_OR_RETURN(proto::ChannelLoss l,
                            proto::DecodeChannelLoss(m.type, m.payload));
  if (!terms_.survive || l.channel >= channels_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CHANNEL_LOST for channel %d (%d channels%s)", l.channel,
        channels_.size(), terms_.survive ? "" : ", not surviving losses"));
  }
  absl::Status cause = proto::ChannelLossStatus(l);
  OnChannelLoss(
      l.channel,
      absl::Status(cause.code(),
                   absl::StrFormat("destination lost it in round %d: %s",
                                   l.round, cause.message())));
  return absl::OkStatus();
}

absl::Status SenderImpl::OnChannelGoneAck(absl::Span<const uint8_t> payload) {
  RAMFERRY_ASSIGN_OR_RETURN(proto::ChannelGoneAck a,
                            proto::DecodeChannelGoneAck(payload));
  if (!terms_.survive) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unexpected CHANNEL_GONE_ACK for channel %d", a.channel));
  }
  RAMFERRY_RETURN_IF_ERROR(losses_.Acknowledge(a.channel, a.round));
  events_.Wake();
  return absl::OkStatus();
}

absl::Status SenderImpl::OnPeerError(absl::Span<const uint8_t> payload) {
  RAMFERRY_ASSIGN_OR_RETURN(proto::ErrorMessage e, proto::DecodeError(payload));
  absl::Status peer(absl::Status(
      static_cast<absl::StatusCode>(e.code),
      absl::StrCat("destination reported",
                   e.channel == proto::kNoChannel
                       ? ""
                       : absl::StrFormat(" (channel %d)", e.channel),
                   ": ", e.text)));
  {
    std::unique_lock<std::mutex> lock(events_.mu);
    events_.peer_error = peer;
    events_.cv.notify_all();
  }
  failure_.Fail(peer, engine::Origin::kPeer);
  return absl::OkStatus();
}

}  // namespace ramferry
