#include "engine/receiver_admission.h"

#include <unistd.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "channels/socket_io.h"
#include "channels/tcp.h"
#include "engine/endpoint.h"
#include "engine/postcopy/postcopy_memory.h"
#include "engine/stream_seal.h"
#include "engine/transport_decorator.h"
#include "proto/packet.h"
#include "ramferry/pinning.h"

namespace ramferry::engine {

namespace {
proto::HelloReply Refuse(absl::StatusCode code, std::string reason) {
  proto::HelloReply r;
  r.status = static_cast<uint16_t>(code);
  r.reason = std::move(reason);
  return r;
}
}  // namespace

absl::Status Admission::Listen() {
  channels::SocketListener::Options ao;
  ao.host = options_.host;
  ao.port = options_.port;
  ao.handshake_timeout = options_.handshake_timeout;
  ao.key = options_.auth_key;
  absl::StatusOr<std::unique_ptr<channels::SocketListener>> a =
      channels::SocketListener::Listen(
          ao, [this](const proto::Hello& h) { return Admit(h); },
          [this](const proto::Hello& h, int fd, const proto::SealKeys* keys) {
            Deliver(h, fd, keys);
          });
  if (!a.ok()) return a.status();
  tcp_listener_ = std::move(*a);
  return absl::OkStatus();
}

void Admission::Stop() {
  if (tcp_listener_ != nullptr) tcp_listener_->Stop();
  CloseUndelivered();
}

void Admission::Wake() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.notify_all();
}

void Admission::Reopen() { ReopenAs(/*resume=*/false); }

void Admission::ReopenForResume() { ReopenAs(/*resume=*/true); }

void Admission::ReopenAs(bool resume) {
  std::unique_ptr<channels::ChannelListener> listener;
  std::vector<ChannelSlot> slots;
  {
    std::unique_lock<std::mutex> lock(mu_);
    session_open_ = false;
    resuming_ = resume;
    if (control_.state == SlotState::kReady) close(control_.fd);
    control_ = {};
    if (urgent_.state == SlotState::kReady) close(urgent_.fd);
    urgent_ = {};
    slots.swap(slots_);
    // Its counts outlive it: the session's refusals still happened.
    if (channel_listener_ != nullptr) {
      retired_refused_ += channel_listener_->refused();
      retired_auth_failures_ += channel_listener_->auth_failures();
    }
    listener = std::move(channel_listener_);
    if (!resume) {
      arrival_digests_.reset();
      zero_pages_.reset();
      held_.reset();
      unauthentic_.reset();
      seal_ = proto::SealMode::kNone;
    }
  }
  // Outside mu_: a listener's callbacks take it while it stops.
  listener.reset();
}

proto::HelloReply Admission::Admit(const proto::Hello& h) {
  std::unique_lock<std::mutex> lock(mu_);
  if (failure_.failed()) {
    return Refuse(absl::StatusCode::kUnavailable,
                  "destination is shutting down");
  }
  const channels::TransportFamily* family =
      channels::FindTransportFamily(h.transport);
  if (family == nullptr) {
    return Refuse(absl::StatusCode::kInvalidArgument,
                  absl::StrFormat("unknown transport %d", h.transport));
  }
  if (h.role == proto::Role::kUrgent) return AdmitUrgent(h);
  if (h.role != proto::Role::kControl) return AdmitData(h);
  proto::HelloReply reply = AdmitControl(h, *family);
  if (reply.status != 0 ||
      (family->capabilities & channels::kCapOwnsConnection) == 0) {
    return reply;
  }
  return StartChannelListener(lock, family->kind, std::move(reply));
}

proto::HelloReply Admission::Preview(const proto::Hello& h) {
  std::unique_lock<std::mutex> lock(mu_);
  if (failure_.failed()) {
    return Refuse(absl::StatusCode::kUnavailable,
                  "destination is shutting down");
  }
  if (h.role != proto::Role::kData) {
    return Refuse(absl::StatusCode::kInvalidArgument,
                  "only data channels come to the channel listener");
  }
  return AdmitData(h, /*reserve=*/false);
}

uint64_t Admission::OfferedCapabilities() const {
  uint64_t offered = proto::kKnownFeatures;
  if (!options_.rdma_reg_batch) offered &= ~proto::kFeatureRdmaRegBatch;
  if (!options_.announce_next_header) offered &= ~proto::kFeatureNextHeaderSize;
  if (!options_.zero_pages) offered &= ~proto::kFeatureZeroPages;
  if (!options_.streams) offered &= ~proto::kFeatureStreams;
  if (!options_.postcopy) {
    offered &= ~(proto::kFeaturePostcopy | proto::kFeaturePostcopyUrgent |
                 proto::kFeaturePostcopyResume);
  }
  // Surviving a lost channel holds on remote placement too: remotely placed
  // data lands without the receive thread, but RemoveChannel shuts the
  // channel's transport down (an RDMA queue pair to error, which places
  // nothing more) before it acknowledges, and the source re-sends only
  // after the acknowledgement.
  return offered;
}

proto::HelloReply Admission::AdmitControl(
    const proto::Hello& h, const channels::TransportFamily& family) {
  absl::Status s = CheckSessionFits(h);
  absl::StatusOr<proto::SealMode> seal = proto::SealMode::kNone;
  if (s.ok()) {
    seal = CheckProtection(h, family);
    s = seal.status();
  }
  if (s.ok()) s = CheckResources(h, family);
  if (s.ok()) s = OpenSession(h, *seal);
  if (!s.ok()) return Refuse(s.code(), std::string(s.message()));
  proto::HelloReply ok;
  ok.capabilities = capabilities_;
  return ok;
}

absl::Status Admission::CheckSessionFits(const proto::Hello& h) const {
  if (session_open_) {
    return absl::ResourceExhaustedError("a session is already in progress");
  }
  // Only a destination that allows post-copy has anything to resume; to
  // one that does not, the bit means nothing (as any feature not offered).
  const bool resume = (h.capabilities & OfferedCapabilities() &
                       proto::kFeaturePostcopyResume) != 0;
  if (resuming_ && (!resume || h.session != session_)) {
    return absl::UnavailableError(
        absl::StrFormat("a post-copy session (%s) is paused here, "
                        "waiting for its source to resume it",
                        session_.ToHex()));
  }
  if (!resuming_ && resume) {
    return absl::NotFoundError("no post-copy session waits here to be resumed");
  }
  if (h.channel_count > options_.max_channels) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d channels requested; at most %d", h.channel_count,
                        options_.max_channels));
  }
  if (h.max_packet_pages > options_.max_packet_pages) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d pages per packet requested; at most %d",
                        h.max_packet_pages, options_.max_packet_pages));
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::SealMode> Admission::CheckProtection(
    const proto::Hello& h, const channels::TransportFamily& family) const {
  absl::StatusOr<proto::SealMode> asked = proto::SealModeOf(h.capabilities);
  if (!asked.ok()) return asked.status();
  const proto::SealMode wanted = SealModeFor(options_, family.capabilities);
  if (!SealModeSatisfies(*asked, wanted)) {
    return absl::PermissionDeniedError(absl::StrFormat(
        // The reason travels in 112 bytes (proto/handshake.h).
        "this destination requires protect = %s or stronger "
        "(--protect=%s); the source asked for %s",
        proto::SealModeName(wanted), proto::SealModeName(wanted),
        proto::SealModeName(*asked)));
  }
  if (*asked != proto::SealMode::kNone &&
      (h.auth == proto::kAuthNone ||
       (family.capabilities & channels::kCapRemotePlacement) != 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("protect = %s needs a key and a transport "
                        "that passes pages through the receiver",
                        proto::SealModeName(*asked)));
  }
  // Fail closed on a family whose channels could not prove the key (every
  // family this build has can: ValidateOptions refuses the rest).
  if ((family.capabilities & channels::kCapAuthenticatedHello) == 0 &&
      !options_.auth_key.empty()) {
    return absl::UnimplementedError(
        absl::StrFormat("this destination requires authentication, which "
                        "%s channels cannot do yet",
                        family.name));
  }
  return *asked;
}

absl::Status Admission::CheckResources(
    const proto::Hello& h, const channels::TransportFamily& family) const {
  // Not offered: not granted, and the source says so. Offered but
  // impossible with these regions or this transport: refused here, with
  // the reason, before a round moves.
  if ((h.capabilities & OfferedCapabilities() & proto::kFeaturePostcopy) != 0) {
    if (absl::Status s = CheckPostcopy(family); !s.ok()) {
      return absl::Status(
          s.code(),
          absl::StrCat("destination cannot run post-copy: ", s.message()));
    }
  }
  // What registering the regions on every channel pins here, refused
  // before any is registered rather than failing one ibv_reg_mr later.
  if ((family.capabilities & channels::kCapRemotePlacement) != 0) {
    SessionOptions as_asked = options_;
    as_asked.transport = family.kind;
    as_asked.channels = h.channel_count;
    as_asked.packet_pages = h.max_packet_pages;
    uint64_t region_bytes = 0;
    for (const Region& r : table_.regions()) region_bytes += r.length;
    if (absl::Status s = CheckPinningLimits(as_asked, kPageSize, region_bytes);
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("destination: ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Admission::OpenSession(const proto::Hello& h,
                                    proto::SealMode seal) {
  // A resumed session keeps what its first part recorded.
  if ((h.capabilities & OfferedCapabilities() &
       proto::kFeatureArrivalDigests) != 0 &&
      arrival_digests_ == nullptr) {
    RAMFERRY_ASSIGN_OR_RETURN(std::unique_ptr<DigestTable> t,
                              DigestTable::Create(table_.regions()));
    arrival_digests_ = std::move(t);
  }
  seal_ = seal;
  session_ = h.session;
  channel_count_ = h.channel_count;
  packet_pages_ = h.max_packet_pages;
  capabilities_ = h.capabilities & OfferedCapabilities();
  transport_ = h.transport;
  rdma_chunk_bytes_ = h.rdma_chunk_bytes;
  survive_ = (capabilities_ & proto::kFeatureSurviveChannelLoss) != 0;
  if ((capabilities_ & proto::kFeatureZeroPages) != 0 &&
      zero_pages_ == nullptr) {
    zero_pages_ = std::make_unique<ZeroPages>(table_.regions());
  }
  if ((capabilities_ & proto::kFeatureDeltaPages) != 0 && held_ == nullptr) {
    held_ = std::make_unique<HeldPages>(table_.regions());
  }
  if (seal_ != proto::SealMode::kNone && unauthentic_ == nullptr) {
    unauthentic_ = std::make_unique<UnauthenticPages>(table_.regions());
  }
  session_open_ = true;
  slots_.clear();
  slots_.resize(h.channel_count);
  urgent_ = {.state = (capabilities_ & proto::kFeaturePostcopyUrgent) != 0
                          ? SlotState::kFree
                          : SlotState::kTaken};
  return absl::OkStatus();
}

proto::HelloReply Admission::AdmitData(const proto::Hello& h, bool reserve) {
  if (!session_open_) {
    return Refuse(absl::StatusCode::kFailedPrecondition,
                  "no session: the control connection comes first");
  }
  if (h.session != session_) {
    return Refuse(absl::StatusCode::kPermissionDenied,
                  absl::StrFormat("session %s is not the active session",
                                  h.session.ToHex()));
  }
  if (h.channel_count != channel_count_ ||
      h.max_packet_pages != packet_pages_ || h.transport != transport_ ||
      h.rdma_chunk_bytes != rdma_chunk_bytes_) {
    return Refuse(
        absl::StatusCode::kInvalidArgument,
        absl::StrFormat("channel count %d / packet pages %d / "
                        "transport %d differ from the session's %d "
                        "/ %d / %d",
                        h.channel_count, h.max_packet_pages, h.transport,
                        channel_count_, packet_pages_, transport_));
  }
  if (slots_[h.channel_index].state != SlotState::kFree) {
    return Refuse(
        absl::StatusCode::kAlreadyExists,
        absl::StrFormat("channel %d is already connected", h.channel_index));
  }
  if (reserve) slots_[h.channel_index].state = SlotState::kReserved;
  proto::HelloReply ok;
  ok.capabilities = capabilities_;
  return ok;
}

absl::Status Admission::CheckPostcopy(
    const channels::TransportFamily& family) const {
  if ((family.capabilities & channels::kCapRemotePlacement) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s places pages in this memory itself, past userfaultfd; use a "
        "socket transport (tcp, tcp-zerocopy, uring-zc)",
        family.name));
  }
  if (options_.survive_channel_loss) {
    return absl::FailedPreconditionError(
        "post-copy does not survive channel loss yet; drop one of the two");
  }
  for (const Region& r : table_.regions()) {
    RAMFERRY_RETURN_IF_ERROR(CheckPostcopyRegion(r));
  }
  return absl::OkStatus();
}

proto::HelloReply Admission::AdmitUrgent(const proto::Hello& h) {
  if (!session_open_ || h.session != session_) {
    return Refuse(absl::StatusCode::kPermissionDenied,
                  "urgent connection for a session that is not the active "
                  "one");
  }
  if (urgent_.state != SlotState::kFree) {
    return Refuse(absl::StatusCode::kAlreadyExists,
                  "the session has no urgent connection to open, or has it");
  }
  urgent_.state = SlotState::kReserved;
  proto::HelloReply ok;
  ok.capabilities = capabilities_;
  return ok;
}

channels::TransportOptions Admission::ChannelOptions() const {
  channels::TransportOptions topts;
  topts.max_header_bytes = proto::PacketHeaderBytes(packet_pages_);
  topts.stall_timeout = options_.stall_timeout;
  return topts;
}

proto::HelloReply Admission::StartChannelListener(
    std::unique_lock<std::mutex>& lock, TransportKind kind,
    proto::HelloReply accepted) {
  channels::ConnectSpec spec;
  spec.host = options_.host;
  spec.port = tcp_listener_->port();
  spec.options = ChannelOptions();
  spec.chunk_bytes = rdma_chunk_bytes_;
  spec.max_inline = options_.rdma_max_inline;
  spec.connect_timeout = options_.handshake_timeout;
  spec.auth_key = options_.auth_key;
  // The session is open, so no other control Hello gets this far, and its
  // source dials no channel before this reply.
  lock.unlock();
  absl::StatusOr<std::unique_ptr<channels::ChannelListener>> l =
      channels::ListenForChannels(
          kind, spec, [this](const proto::Hello& h) { return Admit(h); },
          [this](const proto::Hello& h,
                 absl::StatusOr<std::unique_ptr<channels::Transport>> t) {
            DeliverTransport(h, std::move(t));
          },
          [this](const proto::Hello& h) { return Preview(h); });
  lock.lock();
  if (!l.ok()) {
    session_open_ = false;
    return Refuse(l.status().code(), absl::StrCat("destination cannot serve ",
                                                  TransportKindName(kind), ": ",
                                                  l.status().message()));
  }
  channel_listener_ = std::move(*l);
  return accepted;
}

void Admission::Deliver(const proto::Hello& h, int fd,
                        const proto::SealKeys* keys) {
  std::unique_lock<std::mutex> lock(mu_);
  if (h.role == proto::Role::kControl || h.role == proto::Role::kUrgent) {
    ControlSlot& slot = h.role == proto::Role::kControl ? control_ : urgent_;
    if (h.role == proto::Role::kUrgent &&
        (h.session != session_ || slot.state != SlotState::kReserved)) {
      if (fd >= 0) close(fd);  // a late one, of a session given up
      return;
    }
    // Control frames and page requests are small and wait on each other's
    // answers: none may sit in Nagle's buffer. Best effort.
    if (fd >= 0) (void)channels::SetNoDelay(fd);
    if (fd >= 0) {
      slot.fd = fd;
      if (keys != nullptr) slot.keys = *keys;
      slot.state = SlotState::kReady;
    } else {
      slot.state = SlotState::kLost;
    }
    cv_.notify_all();
    return;
  }
  if (fd < 0 || !channels::SetStallTimeouts(fd, options_.stall_timeout).ok()) {
    if (fd >= 0) close(fd);
    LoseLocked(h);
    return;
  }
  PlaceLocked(h, channels::OpenTcp(fd, ChannelOptions()), fd, keys);
}

void Admission::DeliverTransport(
    const proto::Hello& h,
    absl::StatusOr<std::unique_ptr<channels::Transport>> transport) {
  std::unique_lock<std::mutex> lock(mu_);
  if (transport.ok()) {
    PlaceLocked(h, *std::move(transport), /*fd=*/-1, /*keys=*/nullptr);
    return;
  }
  if (transport.status().code() == absl::StatusCode::kUnauthenticated) {
    // Its peer named the session but did not prove the key: the channel
    // was never the peer's, so the real source may still open it.
    if (ChannelSlot* slot = SlotLocked(h);
        slot != nullptr && slot->state == SlotState::kReserved) {
      slot->state = SlotState::kFree;
    }
    return;
  }
  LoseLocked(h);
}

uint64_t Admission::refused() const {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t n = retired_refused_;
  if (tcp_listener_ != nullptr) n += tcp_listener_->refused();
  if (channel_listener_ != nullptr) n += channel_listener_->refused();
  return n;
}

uint64_t Admission::auth_failures() const {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t n = retired_auth_failures_;
  if (tcp_listener_ != nullptr) n += tcp_listener_->auth_failures();
  if (channel_listener_ != nullptr) n += channel_listener_->auth_failures();
  return n;
}

ChannelSlot* Admission::SlotLocked(const proto::Hello& h) {
  // A delivery from a session since replaced (a listener's late one) finds
  // no slot of its own.
  if (h.session != session_ || h.channel_index >= slots_.size()) {
    return nullptr;
  }
  return &slots_[h.channel_index];
}

void Admission::LoseLocked(const proto::Hello& h) {
  ChannelSlot* slot = SlotLocked(h);
  if (slot == nullptr) return;
  slot->state = SlotState::kLost;
  cv_.notify_all();
}

void Admission::PlaceLocked(const proto::Hello& h,
                            std::unique_ptr<channels::Transport> transport,
                            int fd, const proto::SealKeys* keys) {
  ChannelSlot* found = SlotLocked(h);
  if (found == nullptr) return;  // `transport` closes with this scope
  ChannelSlot& slot = *found;
  if (keys != nullptr) slot.keys = *keys;
  slot.endpoint = fd >= 0 ? LocalEndpointName(fd) : std::string();
  slot.transport = DecorateTransport(
      std::move(transport),
      {.source = false, .channel = h.channel_index, .fd = fd});
  slot.state = SlotState::kReady;
  cv_.notify_all();
}

void Admission::CloseUndelivered() {
  std::unique_lock<std::mutex> lock(mu_);
  if (control_.state == SlotState::kReady) close(control_.fd);
  control_ = {.state = SlotState::kTaken};
  if (urgent_.state == SlotState::kReady) close(urgent_.fd);
  urgent_ = {.state = SlotState::kTaken};
  slots_.clear();
}

absl::StatusOr<AdmittedControl> Admission::TakeControl(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool came = cv_.wait_until(lock, absl::ToChronoTime(deadline), [&] {
    return control_.state != SlotState::kFree || failure_.failed();
  });
  if (failure_.failed()) return failure_.status();
  if (!came) {
    return absl::DeadlineExceededError("no source connected in time");
  }
  if (control_.state == SlotState::kLost) {
    return absl::UnavailableError("control connection lost in handshake");
  }
  AdmittedControl taken{control_.fd, control_.keys, seal_};
  control_ = {.state = SlotState::kTaken};
  return taken;
}

absl::Status Admission::AwaitChannels(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto arrived = [&] {
    uint32_t n = 0;
    for (const ChannelSlot& c : slots_) {
      n += c.state == SlotState::kReady || c.state == SlotState::kLost;
    }
    return n;
  };
  auto urgent_settled = [&] {
    return urgent_.state == SlotState::kReady ||
           urgent_.state == SlotState::kLost ||
           urgent_.state == SlotState::kTaken;
  };
  cv_.wait_until(lock, absl::ToChronoTime(deadline), [&] {
    return (arrived() >= channel_count_ && urgent_settled()) ||
           failure_.failed();
  });
  if (failure_.failed()) return failure_.status();
  if (urgent_.state == SlotState::kLost) {
    return absl::UnavailableError("urgent connection lost in handshake");
  }
  if (!urgent_settled()) {
    return absl::DeadlineExceededError(
        absl::StrFormat("the urgent connection did not come within %s",
                        absl::FormatDuration(options_.handshake_timeout)));
  }
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state == SlotState::kLost) {
      return absl::UnavailableError(
          absl::StrFormat("channel %d: connection lost in handshake", i));
    }
  }
  if (uint32_t n = arrived(); n < channel_count_) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "only %d of %d data channels connected within %s", n, channel_count_,
        absl::FormatDuration(options_.handshake_timeout)));
  }
  return absl::OkStatus();
}

AdmittedChannels Admission::TakeChannels() {
  AdmittedChannels out;
  std::unique_lock<std::mutex> lock(mu_);
  for (ChannelSlot& c : slots_) {
    out.transports.push_back(std::move(c.transport));
    out.keys.push_back(c.keys);
    out.endpoints.push_back(c.endpoint);
    c.state = SlotState::kTaken;
  }
  out.seal = seal_;
  out.config.max_pages = packet_pages_;
  out.config.next_header_size =
      (capabilities_ & proto::kFeatureNextHeaderSize) != 0;
  out.config.landings = {.held = held_.get(),
                         .zeros = zero_pages_.get(),
                         .unauthentic = unauthentic_.get(),
                         .digests = arrival_digests_.get()};
  out.config.compressed_pages =
      (capabilities_ & proto::kFeatureCompressedPages) != 0;
  out.survive = survive_;
  out.postcopy = (capabilities_ & proto::kFeaturePostcopy) != 0;
  out.streams = (capabilities_ & proto::kFeatureStreams) != 0;
  if (urgent_.state == SlotState::kReady) {
    out.urgent_fd = urgent_.fd;
    out.urgent_keys = urgent_.keys;
    urgent_ = {.state = SlotState::kTaken};
  }
  return out;
}

}  // namespace ramferry::engine
