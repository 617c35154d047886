#include "ramferry/receiver.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "channels/channel_factory.h"
#include "channels/socket_io.h"
#include "channels/socket_listener.h"
#include "channels/tcp.h"
#include "channels/transport_family.h"
#include "engine/channel_receiver.h"
#include "engine/control.h"
#include "engine/failure.h"
#include "engine/heartbeat.h"
#include "engine/region_table.h"
#include "engine/round_barrier.h"
#include "engine/status_util.h"
#include "engine/transport_decorator.h"
#include "engine/verify.h"
#include "engine/zero_pages.h"
#include "proto/packet.h"

namespace ramferry {

using engine::Annotate;
using engine::ChannelReceiver;
using engine::ControlChannel;

namespace {
// control_fd_ markers besides a real descriptor.
constexpr int kNotConnected = -1;
constexpr int kLost = -3;   // admitted, then died before delivery
constexpr int kTaken = -4;  // handed to the control channel

// A data channel's progress through admission.
struct ChannelSlot {
  enum State { kFree, kReserved, kLost, kReady, kTaken } state = kFree;
  std::unique_ptr<channels::Transport> transport;  // kReady
};

proto::HelloReply Refuse(absl::StatusCode code, std::string reason) {
  proto::HelloReply r;
  r.status = static_cast<uint16_t>(code);
  r.reason = std::move(reason);
  return r;
}
}  // namespace

class ReceiverImpl {
 public:
  ReceiverImpl(const SessionOptions& options, absl::Span<const Region> regions)
      : options_(options),
        table_(regions),
        failure_([this](const absl::Status& s, engine::Origin o) {
          OnFailure(s, o);
        }) {}

  ~ReceiverImpl() {
    if (tcp_listener_ != nullptr) tcp_listener_->Stop();
    CloseUndelivered();
  }

  absl::Status Listen();
  uint16_t port() const { return tcp_listener_->port(); }
  absl::Status Serve();
  void Abort(const absl::Status& reason) { failure_.Fail(reason); }
  SessionStats stats() const;
  uint64_t applied_rounds() const { return applied_rounds_.load(); }
  uint64_t verified_pages() const { return verified_pages_.load(); }

 private:
  proto::HelloReply Admit(const proto::Hello& hello);
  proto::HelloReply AdmitLocked(const proto::Hello& hello);
  // A data channel arrived: for a socket family as the socket the
  // acceptor took (-1 if it was lost on the way), for a family that owns
  // its connection as the transport its listener made.
  void Deliver(const proto::Hello& hello, int fd);
  void DeliverTransport(const proto::Hello& hello,
                        std::unique_ptr<channels::Transport> transport);
  // Either way, the channel's slot gets its transport (`fd`: the socket
  // under it, or -1). Needs mu_.
  void PlaceLocked(const proto::Hello& hello,
                   std::unique_ptr<channels::Transport> transport, int fd);
  channels::TransportOptions ChannelOptions() const;  // needs mu_
  // Where the session's transport owns its connection set-up, its own
  // listener admits the data channels; it is started between admitting the
  // control Hello and replying to it, without mu_ (its admission takes
  // mu_). Refuses the session where it cannot start.
  proto::HelloReply StartChannelListener(std::unique_lock<std::mutex>& lock,
                                         TransportKind kind,
                                         proto::HelloReply accepted);
  absl::Status ServeSession();
  absl::Status NegotiateRegions(absl::Time deadline);
  absl::Status AwaitChannels(absl::Time deadline);
  absl::Status StartChannels();
  absl::Status ControlLoop();
  absl::Status AwaitFinished();
  absl::Status AnswerVerify(absl::Span<const uint8_t> payload);
  // Surviving channel loss: a receive thread stopped short of FINISH.
  void OnChannelError(const ChannelReceiver::Error& error);
  // CHANNEL_GONE: stops the channel and the round barrier's wait for it.
  absl::Status RemoveChannel(absl::Span<const uint8_t> payload);
  bool ChannelGone(uint32_t channel);
  ChannelLoss* FindLossLocked(uint32_t channel);  // needs loss_mu_
  void OnFailure(const absl::Status& status, engine::Origin origin);
  void CloseUndelivered();

  const SessionOptions options_;
  const engine::RegionTable table_;
  engine::SessionFailure failure_;
  std::unique_ptr<channels::SocketListener> tcp_listener_;
  bool served_ = false;
  bool surviving_ = false;  // Serve thread: the session survives losses

  // Admission state, shared with the acceptor thread.
  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  bool session_open_ = false;
  proto::SessionId session_;
  uint32_t channel_count_ = 0;
  uint32_t packet_pages_ = 0;
  uint64_t capabilities_ = 0;
  // kCapArrivalDigests: a digest of every page as it landed, written by
  // the channel threads, read by AnswerVerify once they are done.
  std::unique_ptr<engine::DigestTable> arrival_digests_;
  // kCapZeroPages: how zero pages are applied to the regions.
  std::unique_ptr<engine::ZeroPages> zero_pages_;
  uint16_t transport_ = 0;
  uint64_t rdma_chunk_bytes_ = 0;
  bool survive_ = false;
  int control_fd_ = kNotConnected;
  std::vector<ChannelSlot> slots_;
  std::unique_ptr<channels::ChannelListener> channel_listener_;

  // Session objects; teardown (any thread) and stats() take objects_mu_.
  mutable std::mutex objects_mu_;
  std::unique_ptr<ControlChannel> control_;
  std::unique_ptr<engine::HeartbeatSender> heartbeat_;  // Serve thread only
  std::unique_ptr<engine::RoundBarrier> barrier_;
  std::vector<std::unique_ptr<ChannelReceiver>> channels_;
  std::atomic<uint64_t> applied_rounds_{0};
  std::atomic<uint64_t> verified_pages_{0};

  // Surviving channel loss: each channel's state, and the losses.
  enum class ChannelState { kLive, kLostHere, kRemoving, kRemoved };
  mutable std::mutex loss_mu_;
  // Guarded by loss_mu_.
  std::vector<ChannelState> channel_state_;
  std::vector<ChannelLoss> losses_;
};

absl::Status ReceiverImpl::Listen() {
  if (absl::Status s = ValidateOptions(options_); !s.ok()) return s;
  if (absl::Status s = engine::ValidateRegions(table_.regions()); !s.ok()) {
    return s;
  }
  channels::SocketListener::Options ao;
  ao.host = options_.host;
  ao.port = options_.port;
  ao.handshake_timeout = options_.handshake_timeout;
  ao.key = options_.auth_key;
  absl::StatusOr<std::unique_ptr<channels::SocketListener>> a =
      channels::SocketListener::Listen(
          ao, [this](const proto::Hello& h) { return Admit(h); },
          [this](const proto::Hello& h, int fd) { Deliver(h, fd); });
  if (!a.ok()) return a.status();
  tcp_listener_ = std::move(*a);
  return absl::OkStatus();
}

proto::HelloReply ReceiverImpl::Admit(const proto::Hello& h) {
  std::unique_lock<std::mutex> lock(mu_);
  proto::HelloReply reply = AdmitLocked(h);
  const TransportKind kind = static_cast<TransportKind>(h.transport);
  if (reply.status != 0 || h.role != proto::Role::kControl ||
      (channels::StaticCapabilities(kind) & channels::kCapOwnsConnection) ==
          0) {
    return reply;
  }
  return StartChannelListener(lock, kind, std::move(reply));
}

proto::HelloReply ReceiverImpl::AdmitLocked(const proto::Hello& h) {
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
  const uint32_t transport_caps = family->capabilities;
  if (h.role == proto::Role::kControl) {
    if (session_open_) {
      return Refuse(absl::StatusCode::kResourceExhausted,
                    "a session is already in progress");
    }
    if (h.channel_count > options_.max_channels) {
      return Refuse(absl::StatusCode::kInvalidArgument,
                    absl::StrFormat("%d channels requested; at most %d",
                                    h.channel_count, options_.max_channels));
    }
    if (h.max_packet_pages > options_.max_packet_pages) {
      return Refuse(
          absl::StatusCode::kInvalidArgument,
          absl::StrFormat("%d pages per packet requested; at most %d",
                          h.max_packet_pages, options_.max_packet_pages));
    }
    uint64_t offered = proto::kKnownCapabilities;
    if (!options_.rdma_reg_batch) offered &= ~proto::kCapRdmaRegBatch;
    if (!options_.announce_next_header) offered &= ~proto::kCapNextHeaderSize;
    if (!options_.zero_pages) offered &= ~proto::kCapZeroPages;
    // Remotely placed data lands without the receive thread: stopping it
    // would not stop a dead channel's data.
    if ((transport_caps & channels::kCapRemotePlacement) != 0) {
      offered &= ~proto::kCapSurviveChannelLoss;
    }
    session_ = h.session;
    channel_count_ = h.channel_count;
    packet_pages_ = h.max_packet_pages;
    capabilities_ = h.capabilities & offered;
    transport_ = h.transport;
    rdma_chunk_bytes_ = h.rdma_chunk_bytes;
    survive_ = (capabilities_ & proto::kCapSurviveChannelLoss) != 0;
    if ((capabilities_ & proto::kCapArrivalDigests) != 0) {
      absl::StatusOr<std::unique_ptr<engine::DigestTable>> t =
          engine::DigestTable::Create(table_.regions());
      if (!t.ok()) {
        return Refuse(t.status().code(), std::string(t.status().message()));
      }
      arrival_digests_ = std::move(*t);
    }
    if ((capabilities_ & proto::kCapZeroPages) != 0) {
      zero_pages_ = std::make_unique<engine::ZeroPages>(table_.regions());
    }
    // Its channels' Hellos could not be authenticated (see options.cc).
    if ((transport_caps & channels::kCapAuthenticatedHello) == 0 &&
        !options_.auth_key.empty()) {
      return Refuse(absl::StatusCode::kUnimplemented,
                    absl::StrFormat("this destination requires "
                                    "authentication, which %s channels "
                                    "cannot do yet",
                                    family->name));
    }
    session_open_ = true;
    slots_.clear();
    slots_.resize(h.channel_count);
    proto::HelloReply ok;
    ok.capabilities = capabilities_;
    return ok;
  }
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
  if (slots_[h.channel_index].state != ChannelSlot::kFree) {
    return Refuse(
        absl::StatusCode::kAlreadyExists,
        absl::StrFormat("channel %d is already connected", h.channel_index));
  }
  slots_[h.channel_index].state = ChannelSlot::kReserved;
  proto::HelloReply ok;
  ok.capabilities = capabilities_;
  return ok;
}

channels::TransportOptions ReceiverImpl::ChannelOptions() const {
  channels::TransportOptions topts;
  topts.max_header_bytes = proto::PacketHeaderBytes(packet_pages_);
  topts.stall_timeout = options_.stall_timeout;
  return topts;
}

proto::HelloReply ReceiverImpl::StartChannelListener(
    std::unique_lock<std::mutex>& lock, TransportKind kind,
    proto::HelloReply accepted) {
  channels::ConnectSpec spec;
  spec.host = options_.host;
  spec.port = tcp_listener_->port();
  spec.options = ChannelOptions();
  spec.chunk_bytes = rdma_chunk_bytes_;
  spec.max_inline = options_.rdma_max_inline;
  spec.connect_timeout = options_.handshake_timeout;
  // The session is open, so no other control Hello gets this far, and its
  // source dials no channel before this reply.
  lock.unlock();
  absl::StatusOr<std::unique_ptr<channels::ChannelListener>> l =
      channels::ListenForChannels(
          kind, spec, [this](const proto::Hello& h) { return Admit(h); },
          [this](const proto::Hello& h,
                 std::unique_ptr<channels::Transport> t) {
            DeliverTransport(h, std::move(t));
          });
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

void ReceiverImpl::Deliver(const proto::Hello& h, int fd) {
  std::unique_lock<std::mutex> lock(mu_);
  if (h.role == proto::Role::kControl) {
    control_fd_ = fd >= 0 ? fd : kLost;
    cv_.notify_all();
    return;
  }
  if (fd < 0 || !channels::SetStallTimeouts(fd, options_.stall_timeout).ok()) {
    if (fd >= 0) close(fd);
    slots_[h.channel_index].state = ChannelSlot::kLost;
    cv_.notify_all();
    return;
  }
  PlaceLocked(h, channels::OpenTcp(fd, ChannelOptions()), fd);
}

void ReceiverImpl::DeliverTransport(
    const proto::Hello& h, std::unique_ptr<channels::Transport> transport) {
  std::unique_lock<std::mutex> lock(mu_);
  PlaceLocked(h, std::move(transport), /*fd=*/-1);
}

void ReceiverImpl::PlaceLocked(const proto::Hello& h,
                               std::unique_ptr<channels::Transport> transport,
                               int fd) {
  ChannelSlot& slot = slots_[h.channel_index];
  slot.transport = engine::DecorateTransport(
      std::move(transport),
      {.source = false, .channel = h.channel_index, .fd = fd});
  slot.state = ChannelSlot::kReady;
  cv_.notify_all();
}

void ReceiverImpl::CloseUndelivered() {
  std::unique_lock<std::mutex> lock(mu_);
  if (control_fd_ >= 0) close(control_fd_);
  control_fd_ = kTaken;
  slots_.clear();
}

absl::Status ReceiverImpl::Serve() {
  if (served_) {
    return absl::FailedPreconditionError("Serve runs once per Receiver");
  }
  served_ = true;
  tcp_listener_->Start();
  absl::Status s = ServeSession();
  if (!s.ok()) failure_.Fail(s);  // tears down, unless already failed
  for (auto& c : channels_) c->Join();
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    if (control_ != nullptr) control_->Shutdown();
  }
  // After the shutdown, so a beat blocked on a stopped source wakes.
  heartbeat_.reset();
  if (!s.ok()) return s;
  return failure_.status();
}

absl::Status ReceiverImpl::ServeSession() {
  int fd;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock,
             [&] { return control_fd_ != kNotConnected || failure_.failed(); });
    if (failure_.failed()) return failure_.status();
    if (control_fd_ == kLost) {
      return absl::UnavailableError("control connection lost in handshake");
    }
    fd = control_fd_;
    control_fd_ = kTaken;
  }
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    control_ = std::make_unique<ControlChannel>(fd, options_.stall_timeout);
  }
  const absl::Time deadline = absl::Now() + options_.handshake_timeout;
  if (absl::Status s = NegotiateRegions(deadline); !s.ok()) return s;
  if (absl::Status s = AwaitChannels(deadline); !s.ok()) return s;
  if (absl::Status s = StartChannels(); !s.ok()) return s;
  heartbeat_ = std::make_unique<engine::HeartbeatSender>(
      control_.get(), engine::HeartbeatInterval(options_.stall_timeout));
  return ControlLoop();
}

absl::Status ReceiverImpl::NegotiateRegions(absl::Time deadline) {
  absl::StatusOr<std::vector<uint8_t>> payload = engine::ReceiveExpected(
      *control_, proto::ControlType::kRegionTable, deadline);
  if (!payload.ok()) return Annotate(payload.status(), "region table");
  absl::StatusOr<std::vector<proto::RegionInfo>> remote =
      proto::DecodeRegionTable(*payload);
  absl::Status s = remote.ok() ? table_.Matches(*remote) : remote.status();
  proto::RegionReply reply{s.ok(), std::string(s.message())};
  if (absl::Status w = control_->Send(proto::EncodeRegionReply(reply));
      !w.ok()) {
    return w;
  }
  // The refusal already went to the source: not again as an ERROR.
  if (!s.ok()) {
    absl::Status refused = Annotate(s, "refused the source's region table");
    failure_.Fail(refused, engine::Origin::kLocalReported);
    return refused;
  }
  return absl::OkStatus();
}

absl::Status ReceiverImpl::AwaitChannels(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto arrived = [&] {
    uint32_t n = 0;
    for (const ChannelSlot& c : slots_) {
      n += c.state == ChannelSlot::kReady || c.state == ChannelSlot::kLost;
    }
    return n;
  };
  cv_.wait_until(lock, absl::ToChronoTime(deadline), [&] {
    return arrived() >= channel_count_ || failure_.failed();
  });
  if (failure_.failed()) return failure_.status();
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state == ChannelSlot::kLost) {
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

absl::Status ReceiverImpl::StartChannels() {
  std::vector<std::unique_ptr<channels::Transport>> transports;
  ChannelReceiver::Config config;
  bool survive;
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (ChannelSlot& c : slots_) {
      transports.push_back(std::move(c.transport));
      c.state = ChannelSlot::kTaken;
    }
    config.max_pages = packet_pages_;
    config.next_header_size = (capabilities_ & proto::kCapNextHeaderSize) != 0;
    config.arrival_digests = arrival_digests_.get();
    config.zero_pages = zero_pages_.get();
    config.compressed_pages = (capabilities_ & proto::kCapCompressedPages) != 0;
    survive = survive_;
  }
  surviving_ = survive;
  {
    std::lock_guard<std::mutex> lock(loss_mu_);
    channel_state_.assign(transports.size(), ChannelState::kLive);
  }
  // Transports that place data remotely (RDMA) need the regions first.
  for (auto& t : transports) {
    for (const Region& r : table_.regions()) {
      if (absl::Status s = t->RegisterRegion(r.id, r.base, r.length); !s.ok()) {
        return s;
      }
    }
  }
  std::lock_guard<std::mutex> lock(objects_mu_);
  barrier_ = std::make_unique<engine::RoundBarrier>(
      transports.size(), [this](uint64_t round, uint64_t pages) {
        applied_rounds_.store(round + 1);
        return control_->Send(proto::EncodeRoundDone({round, pages}));
      });
  ChannelReceiver::ErrorHandler on_error;
  if (survive) {
    on_error = [this](const ChannelReceiver::Error& e) { OnChannelError(e); };
  }
  for (uint32_t i = 0; i < transports.size(); ++i) {
    channels_.push_back(std::make_unique<ChannelReceiver>(
        i, std::move(transports[i]), &table_, config, barrier_.get(), &failure_,
        on_error));
  }
  if (failure_.failed()) return failure_.status();
  for (auto& c : channels_) c->Start();
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
      if (!engine::IsEcho(local) ||
          failure_.origin() == engine::Origin::kPeer) {
        return local;
      }
      if (grace_end == absl::InfiniteFuture()) {
        grace_end = absl::Now() + engine::kRootCauseGrace;
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
    switch (m->type) {
      case proto::ControlType::kFinish:
        if (absl::Status s = proto::DecodeEmpty(m->type, m->payload); !s.ok()) {
          return s;
        }
        return AwaitFinished();
      case proto::ControlType::kVerifyRequest:
        if (absl::Status s = AnswerVerify(m->payload); !s.ok()) return s;
        break;
      case proto::ControlType::kHeartbeat:
        if (absl::Status s = proto::DecodeEmpty(m->type, m->payload); !s.ok()) {
          return s;
        }
        break;
      case proto::ControlType::kChannelGone:
        if (absl::Status s = RemoveChannel(m->payload); !s.ok()) return s;
        break;
      case proto::ControlType::kError: {
        absl::StatusOr<proto::ErrorMessage> e = proto::DecodeError(m->payload);
        if (!e.ok()) return e.status();
        absl::Status peer(static_cast<absl::StatusCode>(e->code),
                          absl::StrCat("source reported: ", e->text));
        if (failure_.Fail(peer, engine::Origin::kPeer)) return peer;
        return engine::PreferRootCause(failure_.status(), peer);
      }
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("unexpected control message ",
                         proto::ControlTypeName(m->type), " from the source"));
    }
  }
}

absl::Status ReceiverImpl::AwaitFinished() {
  // The source sends FINISH on control only after every channel sent its
  // FINISH packet; a channel that does not deliver it in time is broken.
  // A channel lost here is not waited for: FINISH comes after the source
  // saw every round confirmed, so whatever it carried was applied.
  const absl::Time deadline = absl::Now() + options_.stall_timeout;
  for (uint32_t i = 0; i < channels_.size(); ++i) {
    while (!channels_[i]->finished() && !ChannelGone(i) && !failure_.failed() &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  if (failure_.failed()) return failure_.status();
  for (uint32_t i = 0; i < channels_.size(); ++i) {
    if (!channels_[i]->finished() && !ChannelGone(i)) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "channel %d: no FINISH within %s of the source finishing", i,
          absl::FormatDuration(options_.stall_timeout)));
    }
  }
  for (auto& c : channels_) c->Join();
  return control_->Send(proto::EncodeFinishAck());
}

absl::Status ReceiverImpl::AnswerVerify(absl::Span<const uint8_t> payload) {
  absl::StatusOr<proto::VerifyRequest> q = proto::DecodeVerifyRequest(payload);
  if (!q.ok()) return q.status();
  const Region* region = table_.Find(q->region_id);
  if (region == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("verify request for unknown region %d", q->region_id));
  }
  if (q->first_page > region->page_count() ||
      q->page_count > region->page_count() - q->first_page) {
    return absl::OutOfRangeError(absl::StrFormat(
        "verify request for pages [%d, +%d) of region %d with %d pages",
        q->first_page, q->page_count, q->region_id, region->page_count()));
  }
  proto::VerifyResult result;
  result.region_id = q->region_id;
  result.first_page = q->first_page;
  if (arrival_digests_ != nullptr) {
    // What landed, not what memory holds now: the destination may already
    // run on it, and nothing is read again. The channel threads wrote the
    // digests before they arrived at the round barrier whose confirmation
    // the source waited for; taking the barrier's lock makes that order
    // visible to this thread (and to TSan), not only to the peer.
    {
      std::lock_guard<std::mutex> lock(objects_mu_);
      if (barrier_ != nullptr) barrier_->completed_rounds();
    }
    absl::Span<const uint64_t> landed =
        arrival_digests_->region(table_.IndexOf(*region))
            .subspan(q->first_page, q->page_count);
    result.page_digests.assign(landed.begin(), landed.end());
  } else {
    result.page_digests.resize(q->page_count);
    engine::PageDigests(*region, q->first_page,
                        absl::MakeSpan(result.page_digests));
  }
  verified_pages_.fetch_add(q->page_count);
  return control_->Send(proto::EncodeVerifyResult(result));
}

ChannelLoss* ReceiverImpl::FindLossLocked(uint32_t channel) {
  for (ChannelLoss& l : losses_) {
    if (l.channel == channel) return &l;
  }
  return nullptr;
}

bool ReceiverImpl::ChannelGone(uint32_t channel) {
  std::lock_guard<std::mutex> lock(loss_mu_);
  return channel_state_[channel] != ChannelState::kLive;
}

void ReceiverImpl::OnChannelError(const ChannelReceiver::Error& e) {
  // Invalid data is not a lost link, and once the session failed this is
  // the teardown's echo.
  if (!e.connection_failed || failure_.failed()) {
    failure_.Fail(e.status);
    return;
  }
  absl::Status all_lost;
  {
    // Held while reporting, so AwaitFinished cannot acknowledge FINISH
    // between the state change and the report: the source hears of every
    // loss it has to count.
    std::lock_guard<std::mutex> lock(loss_mu_);
    // Removing: the source declared it gone and this is the shutdown.
    if (channel_state_[e.channel] != ChannelState::kLive) return;
    channel_state_[e.channel] = ChannelState::kLostHere;
    losses_.push_back({e.channel, e.round, std::string(e.status.message())});
    if (std::count(channel_state_.begin(), channel_state_.end(),
                   ChannelState::kLive) == 0) {
      all_lost = absl::UnavailableError(
          absl::StrFormat("all %d channels lost: %s", channel_state_.size(),
                          DescribeChannelLosses(losses_)));
    } else {
      // The round barrier keeps waiting for the channel until the source,
      // told of it here, declares it gone (RemoveChannel).
      proto::ChannelLoss lost;
      lost.channel = e.channel;
      lost.round = e.round;
      lost.code = static_cast<uint16_t>(e.status.code());
      lost.text = std::string(e.status.message());
      if (absl::Status s = control_->Send(proto::EncodeChannelLost(lost));
          !s.ok()) {
        all_lost = Annotate(s, "reporting a lost channel");
      }
    }
  }
  if (!all_lost.ok()) failure_.Fail(all_lost);
}

absl::Status ReceiverImpl::RemoveChannel(absl::Span<const uint8_t> payload) {
  if (!surviving_) {
    return absl::InvalidArgumentError(
        "unexpected CHANNEL_GONE: this session does not survive channel loss");
  }
  absl::StatusOr<proto::ChannelLoss> gone =
      proto::DecodeChannelLoss(proto::ControlType::kChannelGone, payload);
  if (!gone.ok()) return gone.status();
  const uint32_t c = gone->channel;
  if (c >= channels_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CHANNEL_GONE for channel %d of %d", c, channels_.size()));
  }
  {
    std::lock_guard<std::mutex> lock(loss_mu_);
    if (channel_state_[c] == ChannelState::kRemoving ||
        channel_state_[c] == ChannelState::kRemoved) {
      return absl::InvalidArgumentError(
          absl::StrFormat("channel %d declared gone twice", c));
    }
    channel_state_[c] = ChannelState::kRemoving;
    const std::string why =
        absl::StrCat("source: ", proto::ChannelLossStatus(*gone).message());
    ChannelLoss* known = FindLossLocked(c);
    if (known == nullptr) {
      losses_.push_back({c, gone->round, why});
    } else {
      known->reason = absl::StrCat("here: ", known->reason, "; ", why);
    }
  }
  // The receive thread stops before the round may go on without it: once
  // joined, nothing more of this channel lands in memory, so no stale copy
  // can overwrite a page the round re-sends, nor a later round's.
  ChannelReceiver& channel = *channels_[c];
  channel.transport().Shutdown();  // a blocked read returns
  barrier_->Detach(c);             // a parked SYNC returns
  channel.Join();
  absl::StatusOr<uint64_t> effective = barrier_->RemoveParty(c, gone->round);
  if (!effective.ok()) {
    // The session ended meanwhile (the barrier was aborted): its cause is
    // the one to report.
    if (failure_.failed()) return failure_.status();
    return Annotate(effective.status(), "CHANNEL_GONE");
  }
  {
    std::lock_guard<std::mutex> lock(loss_mu_);
    channel_state_[c] = ChannelState::kRemoved;
    // The round the session went on without it, as the source reports it.
    FindLossLocked(c)->round = *effective;
  }
  return control_->Send(proto::EncodeChannelGoneAck({c, *effective}));
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
    if (control_ != nullptr && origin == engine::Origin::kLocal) {
      control_->TrySend(proto::EncodeError(proto::MakeErrorMessage(status)),
                        absl::Seconds(1));
    }
    for (auto& c : channels_) c->transport().Shutdown();
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.notify_all();
}

SessionStats ReceiverImpl::stats() const {
  SessionStats s;
  std::lock_guard<std::mutex> lock(objects_mu_);
  for (const auto& c : channels_) {
    s.channels.emplace_back();
    c->ExportStats(&s.channels.back());
  }
  s.rounds = applied_rounds();
  if (tcp_listener_ != nullptr) {
    s.connections_refused = tcp_listener_->refused();
    s.auth_failures = tcp_listener_->auth_failures();
  }
  std::lock_guard<std::mutex> loss_lock(loss_mu_);
  s.channels_lost = losses_;
  for (const ChannelLoss& l : losses_) {
    if (l.channel < s.channels.size()) s.channels[l.channel].lost = 1;
  }
  return s;
}

absl::StatusOr<std::unique_ptr<Receiver>> Receiver::Listen(
    const SessionOptions& options, absl::Span<const Region> regions) {
  auto impl = std::make_unique<ReceiverImpl>(options, regions);
  if (absl::Status s = impl->Listen(); !s.ok()) return s;
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

}  // namespace ramferry
