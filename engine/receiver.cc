#include "ramferry/receiver.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/status_util.h"
#include "engine/control.h"
#include "engine/pages/region_file.h"
#include "engine/postcopy/postcopy_memory.h"
#include "engine/receiver_impl.h"
#include "engine/stream_seal.h"
#include "proto/packet.h"

namespace ramferry {

using base::Annotate;
using engine::ChannelReceiver;
using engine::ControlChannel;

absl::Status ReceiverImpl::Listen() {
  RAMFERRY_RETURN_IF_ERROR(ValidateSession(options_, table_.regions()));
  if (!options_.streams) {
    RAMFERRY_RETURN_IF_ERROR(engine::ValidateRegions(table_.regions()));
  }
  for (const Region& r : table_.regions()) {
    RAMFERRY_RETURN_IF_ERROR(engine::CheckRegionFile(r, /*writable=*/true));
    // Memory post-copy cannot place into is refused now, not when a
    // source asks for it (admission checks again then: mappings change).
    if (options_.postcopy) {
      if (absl::Status s = engine::CheckPostcopyRegion(r); !s.ok()) {
        return Annotate(s, "postcopy is on");
      }
    }
  }
  return admission_.Listen();
}

absl::Status ReceiverImpl::Serve() {
  if (served_) {
    return absl::FailedPreconditionError("Serve runs once per Receiver");
  }
  served_ = true;
  admission_.Start();
  absl::Status served = ServeSession();
  while (true) {
    absl::Status result = EndSession(served);
    engine::PostcopyTarget* p = postcopy();
    if (result.ok() || p == nullptr || !p->resumable() ||
        options_.postcopy_resume_timeout <= absl::ZeroDuration() ||
        aborted_.load()) {
      // On a failure its faulting threads stay blocked (ReleasePostcopy,
      // or the Receiver's end, lets them go).
      if (p != nullptr) p->Stop();
      return result;
    }
    served = ResumeSession(result);
  }
}

absl::Status ReceiverImpl::EndSession(const absl::Status& served) {
  if (!served.ok()) failure_.Fail(served);  // tears down, unless failed
  for (auto& c : channels_) c->Join();
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    if (control_ != nullptr) control_->Shutdown();
  }
  // After the shutdown: a request blocked on the control connection wakes.
  if (engine::PostcopyTarget* p = postcopy(); p != nullptr) p->Detach();
  // After the shutdown, so a beat blocked on a stopped source wakes.
  heartbeat_.reset();
  // Their readers send on the control connection: stopped after it, and
  // before anything else goes.
  if (engine::StreamPeers* streams = stream_peers(); streams != nullptr) {
    streams->Shutdown();
  }
  // Whatever came after the commit point (an Abort, the confirmation
  // lost) cannot undo it: the memory is the caller's to run.
  if (committed_.load(std::memory_order_acquire)) return absl::OkStatus();
  if (!served.ok()) return served;
  return failure_.status();
}

absl::Status ReceiverImpl::ResumeSession(const absl::Status& cause) {
  const absl::Time deadline = absl::Now() + options_.postcopy_resume_timeout;
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    channels_.clear();
    barrier_.reset();
    control_.reset();
    endpoints_.clear();
  }
  resuming_ = true;
  // Every thread that reported to it has stopped: the resumed session
  // starts with no failure.
  failure_.Reset();
  admission_.ReopenForResume();
  while (true) {
    absl::Status opened = OpenSession(deadline);
    if (opened.ok()) break;
    if (aborted_.load() || absl::Now() >= deadline) {
      // Given up for good: Serve returns this rather than waiting again.
      postcopy()->Stop();
      failure_.Fail(cause);
      return absl::Status(
          cause.code(),
          absl::StrFormat(
              "post-copy cut short and not resumed within %s "
              "(the workload here stays paused; "
              "ReleasePostcopy discards it): %s",
              absl::FormatDuration(options_.postcopy_resume_timeout),
              cause.message()));
    }
    AbandonSession(opened);
  }
  RAMFERRY_RETURN_IF_ERROR(StartChannels());
  heartbeat_ = std::make_unique<engine::HeartbeatSender>(
      control_.get(), engine::HeartbeatInterval(options_.stall_timeout));
  if (absl::Status s =
          postcopy()->Reattach(control_.get(), std::move(resumed_urgent_));
      !s.ok()) {
    return Annotate(s, "post-copy resume");
  }
  return ControlLoop();
}

absl::Status ReceiverImpl::ServeSession() {
  // Until its channels start, a session has written nothing here: one
  // that fails before (a control connection that dies, a region table
  // that does not match, channels that never come) is given up, and the
  // destination goes on waiting for its real source.
  while (true) {
    absl::Status opened = OpenSession();
    if (opened.ok()) break;
    if (failure_.failed()) return failure_.status();
    AbandonSession(opened);
  }
  RAMFERRY_RETURN_IF_ERROR(StartChannels());
  heartbeat_ = std::make_unique<engine::HeartbeatSender>(
      control_.get(), engine::HeartbeatInterval(options_.stall_timeout));
  return ControlLoop();
}

absl::Status ReceiverImpl::OpenSession(absl::Time deadline) {
  RAMFERRY_ASSIGN_OR_RETURN(engine::AdmittedControl admitted,
                            admission_.TakeControl(deadline));
  auto control =
      std::make_unique<ControlChannel>(admitted.fd, options_.stall_timeout);
  // Sealed before it is shared: a teardown's last ERROR goes out sealed.
  RAMFERRY_RETURN_IF_ERROR(engine::SealControl(
      admitted.seal, admitted.keys ? &*admitted.keys : nullptr,
      engine::SealEnd::kDestination, *control));
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    control_ = std::move(control);
  }
  const absl::Time handshake = absl::Now() + options_.handshake_timeout;
  RAMFERRY_RETURN_IF_ERROR(NegotiateRegions(handshake));
  return admission_.AwaitChannels(handshake);
}

void ReceiverImpl::AbandonSession(const absl::Status& why) {
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    if (control_ != nullptr) {
      // Best effort: its source, if it is one, learns why.
      control_->TrySend(proto::EncodeError(proto::MakeErrorMessage(why)),
                        absl::Seconds(1));
      control_->Shutdown();
      control_.reset();
    }
  }
  if (resuming_) {
    admission_.ReopenForResume();
  } else {
    admission_.Reopen();
  }
  // Counted only once the destination admits a source again: whoever sees
  // the count may connect the next one at once (seen refused as "already
  // in progress" when the count came first).
  std::lock_guard<std::mutex> lock(objects_mu_);
  ++sessions_abandoned_;
  last_abandoned_ = why.ToString();
}

absl::Status ReceiverImpl::NegotiateRegions(absl::Time deadline) {
  absl::StatusOr<std::vector<uint8_t>> payload = engine::ReceiveExpected(
      *control_, proto::ControlType::kRegionTable, deadline);
  if (!payload.ok()) return Annotate(payload.status(), "region table");
  absl::StatusOr<std::vector<proto::RegionInfo>> remote =
      proto::DecodeRegionTable(*payload);
  absl::Status s = remote.ok() ? table_.Matches(*remote) : remote.status();
  proto::RegionReply reply{s.ok(), std::string(s.message())};
  RAMFERRY_RETURN_IF_ERROR(control_->Send(proto::EncodeRegionReply(reply)));
  if (!s.ok()) return Annotate(s, "refused the source's region table");
  return absl::OkStatus();
}

absl::Status ReceiverImpl::StartChannels() {
  engine::AdmittedChannels admitted = admission_.TakeChannels();
  std::vector<std::unique_ptr<channels::Transport>>& transports =
      admitted.transports;
  const bool survive = admitted.survive;
  surviving_ = survive;
  {
    std::lock_guard<std::mutex> lock(loss_mu_);
    channel_state_.assign(transports.size(), ChannelState::kLive);
  }
  // Transports that place data remotely (RDMA) need the regions first.
  for (auto& t : transports) {
    for (const Region& r : table_.regions()) {
      RAMFERRY_RETURN_IF_ERROR(t->RegisterRegion(r.id, r.base, r.length));
    }
  }
  std::lock_guard<std::mutex> lock(objects_mu_);
  if (admitted.postcopy) {
    RAMFERRY_RETURN_IF_ERROR(MakePostcopyLocked(admitted));
  }
  if (admitted.streams) {
    streams_ = std::make_unique<engine::StreamPeers>(
        on_stream_open_,
        [this](absl::Span<const uint8_t> frame) {
          return control_->Send(frame);
        },
        [this](const absl::Status& s) { failure_.Fail(s); },
        options_.stall_timeout);
    admitted.config.streams = streams_->sink();
  }
  endpoints_ = std::move(admitted.endpoints);
  barrier_ = std::make_unique<engine::RoundBarrier>(
      transports.size(), [this](uint64_t round, uint64_t pages) {
        // A page no tag vouched for, left as its round completes: a lost
        // channel's cut packet comes again within the round it was cut in
        // (before the SYNCs that complete it), so what is left was forged.
        // Refused here, before ROUND_DONE, the source fails before its
        // commit point and resumes, rather than meet it at FINISH.
        RAMFERRY_RETURN_IF_ERROR(CheckAuthentic(
            absl::StrFormat("round %d cannot be confirmed", round)));
        applied_rounds_.store(round + 1);
        return control_->Send(proto::EncodeRoundDone({round, pages}));
      });
  ChannelReceiver::ErrorHandler on_error;
  if (survive) {
    on_error = [this](const ChannelReceiver::Error& e) { OnChannelError(e); };
  }
  for (uint32_t i = 0; i < transports.size(); ++i) {
    absl::StatusOr<std::unique_ptr<proto::Sealer>> opener =
        engine::MakeChannelSealer(
            admitted.seal, admitted.keys[i] ? &*admitted.keys[i] : nullptr,
            engine::SealEnd::kDestination);
    if (!opener.ok()) {
      return Annotate(opener.status(), absl::StrFormat("channel %d", i));
    }
    channels_.push_back(std::make_unique<ChannelReceiver>(
        i, std::move(transports[i]), &table_, admitted.config, barrier_.get(),
        &failure_, on_error, std::move(*opener)));
  }
  if (failure_.failed()) return failure_.status();
  for (auto& c : channels_) c->Start();
  return absl::OkStatus();
}

absl::Status ReceiverImpl::MakePostcopyLocked(
    engine::AdmittedChannels& admitted) {
  std::unique_ptr<ControlChannel> urgent;
  if (admitted.urgent_fd >= 0) {
    urgent = std::make_unique<ControlChannel>(admitted.urgent_fd,
                                              options_.stall_timeout);
    if (absl::Status s = engine::SealControl(
            admitted.seal,
            admitted.urgent_keys ? &*admitted.urgent_keys : nullptr,
            engine::SealEnd::kDestination, *urgent);
        !s.ok()) {
      return Annotate(s, "urgent connection");
    }
  }
  if (postcopy_ != nullptr) {
    // A resumed session: the target lives on, reattached once the
    // channels run.
    resumed_urgent_ = std::move(urgent);
  } else {
    postcopy_ = std::make_unique<engine::PostcopyTarget>(
        table_, admission_.arrival_digests(), control_.get(), std::move(urgent),
        &failure_);
    postcopy_->SetOnArmed(on_postcopy_armed_);
    postcopy_->SetArmGate([this] { return ArmGate(); });
  }
  admitted.config.postcopy = postcopy_.get();
  return absl::OkStatus();
}

absl::Status ReceiverImpl::ControlLoop() {
  absl::Time grace_end = absl::InfiniteFuture();
  absl::Time last_heard = absl::Now();
  while (true) {
    if (failure_.failed()) {
      // A local echo (a channel saw EOF) may be the source's doing: give
      // its ERROR a moment to arrive and say why.
      absl::Status local = failure_.status();
      if (!base::IsEcho(local) || failure_.origin() == engine::Origin::kPeer) {
        return local;
      }
      if (grace_end == absl::InfiniteFuture()) {
        grace_end = absl::Now() + base::kRootCauseGrace;
      }
      if (absl::Now() >= grace_end) return local;
    }
    // Short waits: the loop also notices failures from other threads.
    if (!control_->WaitReadable(absl::Milliseconds(100))) {
      // The source beats every stall_timeout / 4, even between rounds.
      if (absl::Now() - last_heard > options_.stall_timeout) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "source stalled: no control message, not even a heartbeat, for "
            "%s",
            absl::FormatDuration(options_.stall_timeout)));
      }
      continue;
    }
    absl::StatusOr<ControlChannel::Message> m =
        control_->Receive(absl::Now() + options_.stall_timeout);
    last_heard = absl::Now();
    if (!m.ok()) {
      if (failure_.failed()) return failure_.status();
      return absl::UnavailableError(absl::StrCat(
          "lost the control connection to the source: ", m.status().message()));
    }
    if (std::optional<absl::Status> end = Dispatch(*m); end.has_value()) {
      return *std::move(end);
    }
  }
}

namespace {
// A handler's status, as Dispatch answers it: an error ends the session.
std::optional<absl::Status> EndIfError(absl::Status s) {
  if (s.ok()) return std::nullopt;
  return s;
}
}  // namespace

std::optional<absl::Status> ReceiverImpl::Dispatch(
    const ControlChannel::Message& m) {
  switch (m.type) {
    case proto::ControlType::kFinish:
      return OnFinish(m);
    case proto::ControlType::kVerifyRequest:
      return EndIfError(AnswerVerify(m.payload));
    case proto::ControlType::kHeartbeat:
      return EndIfError(proto::DecodeEmpty(m.type, m.payload));
    case proto::ControlType::kChannelGone:
      return EndIfError(RemoveChannel(m.payload));
    case proto::ControlType::kError:
      return OnPeerError(m.payload);
    case proto::ControlType::kStreamOpen:
      if (engine::StreamPeers* streams = stream_peers(); streams != nullptr) {
        return EndIfError(streams->Open(m.payload));
      }
      return absl::InvalidArgumentError(
          "STREAM_OPEN in a session that does not carry streams");
    case proto::ControlType::kMissingPages:
      if (engine::PostcopyTarget* p = postcopy(); p != nullptr) {
        return EndIfError(OnMissingPages(*p, m.payload));
      }
      return absl::InvalidArgumentError(
          "MISSING_PAGES in a session that did not negotiate post-copy");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected control message ",
                       proto::ControlTypeName(m.type), " from the source"));
  }
}

absl::Status ReceiverImpl::OnFinish(const ControlChannel::Message& m) {
  RAMFERRY_RETURN_IF_ERROR(proto::DecodeEmpty(m.type, m.payload));
  if (engine::PostcopyTarget* p = postcopy(); p != nullptr) {
    RAMFERRY_RETURN_IF_ERROR(p->CheckFinished());
  }
  return AwaitFinished();
}

absl::Status ReceiverImpl::OnMissingPages(engine::PostcopyTarget& p,
                                          absl::Span<const uint8_t> payload) {
  // The switch makes this memory live.
  RAMFERRY_RETURN_IF_ERROR(
      CheckAuthentic("post-copy cannot make the memory live"));
  // Post-copy's commit point on this side: the caller may still refuse (a
  // cancel that came first), before any page is dropped; from here it
  // refuses no cancel. Once, at the switch's first message.
  if (on_commit_ && !commit_asked_) {
    commit_asked_ = true;
    RAMFERRY_RETURN_IF_ERROR(on_commit_());
  }
  absl::Status s = p.OnMissingPages(payload);
  std::lock_guard<std::mutex> lock(objects_mu_);
  // POSTCOPY_ARMED went out (the source takes an ERROR after it as a
  // failure after the switch), or arming never began (ArmGate): an ERROR
  // may go again. Armed but its send failed: the source may not know, and
  // none does.
  if (s.ok() || !p.armed()) arming_.store(false, std::memory_order_release);
  return s;
}

absl::Status ReceiverImpl::ArmGate() {
  std::lock_guard<std::mutex> lock(objects_mu_);
  // As Commit(): a failure recorded first has sent its ERROR, or will,
  // and this side does not arm; one after it sends none until
  // POSTCOPY_ARMED is out, ahead of it.
  if (failure_.failed()) return failure_.status();
  arming_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status ReceiverImpl::OnPeerError(absl::Span<const uint8_t> payload) {
  RAMFERRY_ASSIGN_OR_RETURN(proto::ErrorMessage e, proto::DecodeError(payload));
  absl::Status peer(static_cast<absl::StatusCode>(e.code),
                    absl::StrCat("source reported: ", e.text));
  if (failure_.Fail(peer, engine::Origin::kPeer)) return peer;
  return base::PreferRootCause(failure_.status(), peer);
}

absl::Status ReceiverImpl::AwaitFinished() {
  // The source sends FINISH on control only after every channel sent its
  // FINISH packet; a channel that does not deliver it in time is broken.
  // A channel lost here is not waited for: FINISH comes after the source
  // saw every round confirmed, so whatever it carried was applied.
  // Every way a channel stops (its FINISH, its loss, the session's
  // failure, which shuts every transport down) returns its thread.
  const absl::Time deadline = absl::Now() + options_.stall_timeout;
  for (auto& c : channels_) c->AwaitStopped(deadline);
  if (failure_.failed()) return failure_.status();
  for (uint32_t i = 0; i < channels_.size(); ++i) {
    if (!channels_[i]->finished() && !ChannelGone(i)) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "channel %d: no FINISH within %s of the source finishing", i,
          absl::FormatDuration(options_.stall_timeout)));
    }
  }
  for (auto& c : channels_) c->Join();
  // Nothing more may land: on rdma this ends the source's remote access to
  // the regions (each queue pair goes to error) before the session is
  // reported done, not whenever the Receiver is destroyed.
  for (auto& c : channels_) c->transport().Shutdown();
  RAMFERRY_RETURN_IF_ERROR(CheckAuthentic("the session cannot end"));
  if (engine::StreamPeers* streams = stream_peers(); streams != nullptr) {
    RAMFERRY_RETURN_IF_ERROR(streams->CheckEnded());
  }
  // The caller may still refuse (a cancel that came first). Every refusal
  // until Commit() ends the session with an ERROR to the source, which it
  // takes as proof that this side did not commit.
  if (on_commit_ && !commit_asked_) {
    commit_asked_ = true;
    RAMFERRY_RETURN_IF_ERROR(on_commit_());
  }
  if (!Commit()) return failure_.status();
  // Committed: the memory is the caller's whatever happens to the
  // confirmation. If it is lost, the source reports the outcome unknown
  // and keeps its workload paused, so this side is the one that runs it.
  (void)control_->Send(proto::EncodeFinishAck());
  return absl::OkStatus();
}

bool ReceiverImpl::Commit() {
  std::lock_guard<std::mutex> lock(objects_mu_);
  // OnFailure sends its ERROR under the same lock: a failure recorded
  // before this point has sent it, or will, and this side never commits;
  // one recorded after it sends none.
  if (failure_.failed()) return false;
  committed_.store(true, std::memory_order_release);
  return true;
}

absl::Status ReceiverImpl::CheckAuthentic(absl::string_view when) const {
  const engine::UnauthenticPages* u = admission_.unauthentic_pages();
  return u == nullptr || u->count() == 0 ? absl::OkStatus()
                                         : u->CheckEmpty(when);
}

void ReceiverImpl::OnFailure(const absl::Status& status,
                             engine::Origin origin) {
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    // The barrier first: a RoundDone is sent under its lock, so once it is
    // aborted no round is confirmed any more, and every RoundDone is on the
    // wire before the ERROR. The source stops reading at the ERROR; a
    // RoundDone behind it would be applied here but never counted there.
    if (barrier_ != nullptr) barrier_->Abort();
    // The reason next, then the sockets: the source can tell the cause
    // from the echo. The control connection stays open for the Serve
    // thread, which reads a last ERROR from the source and closes it.
    // Never once committed: the source takes an ERROR that comes before
    // FINISH_ACK as proof that this side did not commit (and resumes its
    // workload), so after the commit point there is nothing to report.
    if (control_ != nullptr && origin == engine::Origin::kLocal &&
        !committed_.load(std::memory_order_acquire) &&
        !arming_.load(std::memory_order_acquire)) {
      control_->TrySend(proto::EncodeError(proto::MakeErrorMessage(status)),
                        absl::Seconds(1));
    }
    for (auto& c : channels_) c->transport().Shutdown();
    // Each peer sees its stream cut, never a clean end.
    if (streams_ != nullptr) streams_->Shutdown();
  }
  admission_.Wake();
}

SessionStats ReceiverImpl::stats() const {
  SessionStats s;
  std::lock_guard<std::mutex> lock(objects_mu_);
  for (size_t i = 0; i < channels_.size(); ++i) {
    s.channels.emplace_back();
    channels_[i]->ExportStats(&s.channels.back());
    if (i < endpoints_.size()) s.channels.back().endpoint = endpoints_[i];
  }
  s.rounds = applied_rounds();
  s.sessions_abandoned = sessions_abandoned_;
  s.last_abandoned = last_abandoned_;
  s.connections_refused = admission_.refused();
  s.auth_failures = admission_.auth_failures();
  std::lock_guard<std::mutex> loss_lock(loss_mu_);
  s.channels_lost = losses_;
  for (const ChannelLoss& l : losses_) {
    if (l.channel < s.channels.size()) s.channels[l.channel].lost = 1;
  }
  if (postcopy_ != nullptr) s.postcopy = postcopy_->stats();
  if (streams_ != nullptr) {
    const auto n = static_cast<uint32_t>(channels_.size());
    for (const engine::StreamPeers::Counts& c : streams_->counts()) {
      s.streams.push_back({.stream = c.stream,
                           .channel = n == 0 ? 0 : c.stream % n,
                           .forward_bytes = c.delivered,
                           .back_bytes = c.back,
                           .forward_ended = c.ended,
                           .back_ended = c.back_ended});
    }
  }
  return s;
}

absl::StatusOr<std::unique_ptr<Receiver>> Receiver::Listen(
    const SessionOptions& options, absl::Span<const Region> regions) {
  auto impl = std::make_unique<ReceiverImpl>(options, regions);
  RAMFERRY_RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<Receiver>(new Receiver(std::move(impl)));
}

Receiver::Receiver(std::unique_ptr<ReceiverImpl> impl)
    : impl_(std::move(impl)) {}
Receiver::~Receiver() = default;
uint16_t Receiver::port() const { return impl_->port(); }
absl::Status Receiver::Serve() { return impl_->Serve(); }
void Receiver::Abort(const absl::Status& reason) { impl_->Abort(reason); }
SessionStats Receiver::stats() const { return impl_->stats(); }
uint64_t Receiver::applied_rounds() const { return impl_->applied_rounds(); }
uint64_t Receiver::verified_pages() const { return impl_->verified_pages(); }

void Receiver::OnPostcopyArmed(std::function<void()> armed) {
  impl_->OnPostcopyArmed(std::move(armed));
}

void Receiver::OnStreamOpen(
    std::function<absl::StatusOr<int>(uint32_t stream)> open) {
  impl_->OnStreamOpen(std::move(open));
}
void Receiver::OnCommit(std::function<absl::Status()> commit) {
  impl_->OnCommit(std::move(commit));
}

bool Receiver::IsResident(uint32_t region_id, uint64_t first_page,
                          uint64_t pages) const {
  if (engine::PostcopyTarget* p = impl_->postcopy(); p != nullptr) {
    return p->IsResident(region_id, first_page, pages);
  }
  return impl_->HoldsRange(region_id, first_page, pages);
}

absl::Status Receiver::WaitResident(uint32_t region_id, uint64_t first_page,
                                    uint64_t pages, absl::Time deadline) {
  engine::PostcopyTarget* p = impl_->postcopy();
  if (p == nullptr) return absl::OkStatus();
  return p->WaitResident(region_id, first_page, pages, deadline);
}

absl::Status Receiver::RequestPages(uint32_t region_id, uint64_t first_page,
                                    uint64_t pages) {
  engine::PostcopyTarget* p = impl_->postcopy();
  if (p == nullptr) {
    return absl::FailedPreconditionError(
        "RequestPages: the session is not in post-copy");
  }
  return p->RequestPages(region_id, first_page, pages);
}

absl::StatusOr<uint64_t> Receiver::ReleasePostcopy() {
  engine::PostcopyTarget* p = impl_->postcopy();
  if (p == nullptr) return uint64_t{0};
  return p->ReleaseAll();
}

}  // namespace ramferry
