#include "ramferry/sender.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "channels/channel_factory.h"
#include "channels/transport_family.h"
#include "engine/channel_sender.h"
#include "engine/control.h"
#include "engine/failure.h"
#include "engine/heartbeat.h"
#include "engine/region_table.h"
#include "engine/scheduler.h"
#include "engine/sent_ledger.h"
#include "engine/status_util.h"
#include "engine/transport_decorator.h"
#include "engine/untouched.h"
#include "engine/verify.h"
#include "proto/packet.h"

namespace ramferry {

using engine::Annotate;
using engine::ChannelSender;
using engine::CommandRing;
using engine::CommandType;
using engine::ControlChannel;

class SenderImpl {
 public:
  SenderImpl(const SessionOptions& options, absl::Span<const Region> regions)
      : options_(options),
        regions_(regions),
        failure_([this](const absl::Status& s, engine::Origin o) {
          OnFailure(s, o);
        }) {}

  ~SenderImpl() {
    if (!finished_) Abort(absl::CancelledError("sender closed before Finish"));
    for (auto& c : channels_) c->Join();
    if (control_ != nullptr) control_->Shutdown();  // wakes a blocked beat
    if (heartbeat_ != nullptr) heartbeat_->Stop();
    if (control_thread_.joinable()) control_thread_.join();
  }

  absl::Status Setup();
  absl::StatusOr<RoundResult> SendRound(absl::Span<DirtyBitmap* const> dirty);
  absl::Status StartRound(absl::Span<DirtyBitmap* const> dirty);
  absl::StatusOr<RoundResult> AwaitRound();
  absl::Status StartVerify();
  absl::StatusOr<VerifyReport> Verify();
  absl::Status Finish();
  void Abort(const absl::Status& reason) { failure_.Fail(reason); }
  SessionStats stats() const;
  std::vector<std::string> warnings() const { return warnings_; }
  uint64_t confirmed_rounds() const {
    return confirmed_mirror_.load(std::memory_order_acquire);
  }

 private:
  absl::Status OpenChannels(absl::Time deadline);
  uint64_t OfferedCapabilities() const;
  // One data channel, dialled the way its family connects.
  absl::StatusOr<std::unique_ptr<channels::Transport>> OpenChannel(
      const proto::Hello& hello, const channels::TransportOptions& topts,
      absl::Time deadline);
  bool Has(uint32_t capability) const {
    return (transport_caps_ & capability) != 0;
  }
  void ControlLoop();
  void OnFailure(const absl::Status& status, engine::Origin origin);
  // The error to hand the caller once the session failed.
  absl::Status FinalStatus();
  // Pushes a barrier of `type` into every live ring and waits for all of
  // them (AwaitRings).
  absl::Status Barrier(CommandType type, uint64_t round);
  // Waits until every live ring executed the last barrier pushed to it,
  // handling the losses that come up meanwhile.
  absl::Status AwaitRings();
  // Checks the destination applied as many pages as `round` sent.
  absl::Status CheckApplied(uint64_t round, uint64_t sent_pages);
  // Awaits every round StartRound left in flight (Verify, Finish).
  absl::Status AwaitStartedRounds();

  // ---- surviving channel loss (survive_ only; caller thread) ----
  // A channel died: from its own thread (a send failed) or the control
  // thread (the destination's CHANNEL_LOST). Queues it and stops the channel.
  void OnChannelLoss(uint32_t channel, const absl::Status& cause);
  bool LossPending();
  // Declares every queued loss (DeclareGone), in order.
  absl::Status HandleLosses();
  // Stops channel `channel` here, tells the destination it is gone, and
  // once it confirms, re-sends the channel's batches of the open round on
  // the live channels, followed by one more SYNC on each.
  absl::Status DeclareGone(uint32_t channel, const absl::Status& cause);
  // The first round's ranges that need not be read or sent (one list per
  // region; none where skip_untouched does not apply).
  std::vector<std::vector<proto::ZeroRange>> UntouchedRanges(uint64_t round);
  // Waits (for at most `timeout`) until `ready()` holds under mu_, the
  // session fails, or the control connection closes.
  template <typename Pred>
  absl::Status AwaitControl(Pred ready, absl::Duration timeout,
                            const std::string& what);

  const SessionOptions options_;
  const absl::Span<const Region> regions_;
  engine::SessionFailure failure_;
  proto::SessionId session_;
  uint64_t capabilities_ = 0;  // negotiated session features (proto::kCap*)
  // What the transport promises (channels::kCap*), and the kind its
  // channels run (options_.transport, or its fallback).
  uint32_t transport_caps_ = 0;
  TransportKind channel_kind_ = TransportKind::kTcp;
  std::unique_ptr<ControlChannel> control_;
  std::vector<std::unique_ptr<ChannelSender>> channels_;
  std::unique_ptr<engine::Scheduler> scheduler_;
  std::thread control_thread_;
  std::unique_ptr<engine::HeartbeatSender> heartbeat_;
  // Surviving channel loss: both ends agreed to it (set during Setup).
  bool survive_ = false;
  // Caller thread only.
  std::unique_ptr<engine::SentLedger> ledger_;  // survive_ only
  // VerifyMode::kSent: what each page's last send carried.
  std::unique_ptr<engine::DigestTable> sent_digests_;
  // This side's memory, being hashed since StartVerify (kFull, kReread).
  std::unique_ptr<engine::BackgroundDigests> local_digests_;
  std::vector<bool> lost_;          // per channel, declared gone
  std::vector<uint32_t> last_seq_;  // per channel: last barrier pushed, or 0
  std::optional<uint64_t> open_round_;  // the round SendRound is sending
  bool finishing_ = false;
  std::vector<std::string> warnings_;  // written during Setup only
  uint64_t next_round_ = 0;            // caller thread only
  // StartRound's rounds not yet awaited, oldest first (caller thread);
  // in survive mode StartRound completes a round at once and keeps its
  // result here.
  struct StartedRound {
    uint64_t round, pages, bytes;
    absl::Time start;
    std::optional<RoundResult> done;
  };
  std::deque<StartedRound> started_;
  bool finished_ = false;  // caller thread only

  // Events from the control thread.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  uint64_t confirmed_rounds_ = 0;
  // Pages the destination applied in each confirmed round not yet
  // checked against what was sent, oldest first.
  std::deque<uint64_t> confirmed_pages_;
  bool finish_acked_ = false;
  bool control_closed_ = false;
  std::optional<absl::Status> peer_error_;
  std::deque<proto::VerifyResult> verify_results_;
  // Channels that died and were not declared gone yet, with the cause.
  std::deque<std::pair<uint32_t, absl::Status>> pending_losses_;
  std::map<uint32_t, uint64_t> gone_acks_;  // channel -> effective round
  std::vector<ChannelLoss> losses_;
  uint64_t resent_pages_ = 0;
  std::atomic<uint64_t> confirmed_mirror_{0};
};

absl::Status SenderImpl::Setup() {
  if (absl::Status s = ValidateOptions(options_); !s.ok()) return s;
  if (absl::Status s = engine::ValidateRegions(regions_); !s.ok()) return s;
  absl::StatusOr<channels::ResolvedTransport> resolved =
      channels::ResolveTransport(options_.transport,
                                 options_.fallback_to_tcp_zerocopy);
  if (!resolved.ok()) return resolved.status();
  channel_kind_ = resolved->kind;
  if (!resolved->warning.empty()) warnings_.push_back(resolved->warning);
  transport_caps_ = channels::StaticCapabilities(options_.transport);
  session_ = engine::NewSessionId();

  absl::StatusOr<int> fd = channels::ConnectWithRetry(
      options_.host, options_.port, options_.connect_timeout);
  if (!fd.ok()) return Annotate(fd.status(), "control connection");
  control_ = std::make_unique<ControlChannel>(*fd, options_.stall_timeout);
  const absl::Time deadline = absl::Now() + options_.handshake_timeout;

  proto::Hello hello;
  hello.role = proto::Role::kControl;
  hello.session = session_;
  hello.channel_count = options_.channels;
  hello.capabilities = OfferedCapabilities();
  hello.max_packet_pages = options_.packet_pages;
  hello.transport = static_cast<uint16_t>(options_.transport);
  if (Has(channels::kCapChunkedRegistration)) {
    hello.rdma_chunk_bytes = options_.rdma_chunk_bytes;
  }
  absl::StatusOr<proto::HelloReply> reply =
      channels::ExchangeHello(*fd, hello, options_.auth_key, deadline);
  if (!reply.ok()) return Annotate(reply.status(), "control connection");
  capabilities_ = reply->capabilities & proto::kKnownCapabilities;
  if (options_.survive_channel_loss) {
    if ((capabilities_ & proto::kCapSurviveChannelLoss) == 0) {
      return absl::FailedPreconditionError(
          "survive_channel_loss: the destination cannot survive channel loss "
          "(an older ramferry, or a transport it does not support it on)");
    }
    survive_ = true;
  }

  engine::RegionTable table(regions_);
  if (absl::Status s =
          control_->Send(proto::EncodeRegionTable(table.Describe()));
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::vector<uint8_t>> payload = engine::ReceiveExpected(
      *control_, proto::ControlType::kRegionReply, deadline);
  if (!payload.ok()) return Annotate(payload.status(), "region table");
  absl::StatusOr<proto::RegionReply> regions =
      proto::DecodeRegionReply(*payload);
  if (!regions.ok()) return regions.status();
  if (!regions->accepted) {
    return absl::FailedPreconditionError(absl::StrCat(
        "destination refused the region table: ", regions->reason));
  }
  if (options_.verify == VerifyMode::kSent) {
    absl::StatusOr<std::unique_ptr<engine::DigestTable>> t =
        engine::DigestTable::Create(regions_);
    if (!t.ok()) return t.status();
    sent_digests_ = std::move(*t);
  }
  if (absl::Status s = OpenChannels(deadline); !s.ok()) return s;

  std::vector<CommandRing*> rings;
  for (auto& c : channels_) rings.push_back(&c->ring());
  std::function<absl::Status(size_t)> drain;
  if (options_.single_thread) {
    drain = [this](size_t i) { return channels_[i]->DrainInline(); };
  }
  lost_.assign(channels_.size(), false);
  last_seq_.assign(channels_.size(), 0);
  if (survive_) {
    ledger_ = std::make_unique<engine::SentLedger>(channels_.size(), regions_);
  }
  scheduler_ = std::make_unique<engine::Scheduler>(
      rings, regions_, options_.packet_pages, std::move(drain), ledger_.get());
  if (!options_.single_thread) {
    for (auto& c : channels_) c->Start();
  }
  heartbeat_ = std::make_unique<engine::HeartbeatSender>(
      control_.get(), engine::HeartbeatInterval(options_.stall_timeout));
  control_thread_ = std::thread([this] { ControlLoop(); });
  return absl::OkStatus();
}

absl::Status SenderImpl::OpenChannels(absl::Time deadline) {
  channels::TransportOptions topts;
  topts.max_header_bytes = proto::PacketHeaderBytes(options_.packet_pages);
  topts.header_slots = options_.header_slots;
  topts.completion = options_.completion;
  topts.stall_timeout = options_.stall_timeout;
  topts.registered_buffers = options_.registered_buffers;
  for (uint32_t i = 0; i < options_.channels; ++i) {
    const std::string where = absl::StrFormat("channel %d", i);
    proto::Hello hello;
    hello.role = proto::Role::kData;
    hello.session = session_;
    hello.channel_index = i;
    hello.channel_count = options_.channels;
    hello.capabilities = capabilities_;
    hello.max_packet_pages = options_.packet_pages;
    hello.transport = static_cast<uint16_t>(options_.transport);
    if (Has(channels::kCapChunkedRegistration)) {
      hello.rdma_chunk_bytes = options_.rdma_chunk_bytes;
    }
    absl::StatusOr<std::unique_ptr<channels::Transport>> transport =
        OpenChannel(hello, topts, deadline);
    if (!transport.ok()) return Annotate(transport.status(), where);
    for (const Region& r : regions_) {
      if (absl::Status s = (*transport)->RegisterRegion(r.id, r.base, r.length);
          !s.ok()) {
        return Annotate(s, where);
      }
    }
    ChannelSender::LossHandler on_loss;
    if (survive_) {
      on_loss = [this](uint32_t c, const absl::Status& cause) {
        OnChannelLoss(c, cause);
      };
    }
    ChannelSender::Config config;
    config.ring_entries = options_.ring_entries;
    config.max_pages = options_.packet_pages;
    config.announce_next_header =
        (capabilities_ & proto::kCapNextHeaderSize) != 0;
    config.sent_digests = sent_digests_.get();
    config.zero_pages = (capabilities_ & proto::kCapZeroPages) != 0;
    if ((capabilities_ & proto::kCapCompressedPages) != 0) {
      config.compression = options_.compression;
      config.compression_level = options_.compression_level;
    }
    channels_.push_back(
        std::make_unique<ChannelSender>(i, std::move(*transport), regions_,
                                        config, &failure_, std::move(on_loss)));
  }
  return absl::OkStatus();
}

uint64_t SenderImpl::OfferedCapabilities() const {
  uint64_t caps = proto::kCapVerify;
  if (options_.survive_channel_loss) caps |= proto::kCapSurviveChannelLoss;
  if (options_.announce_next_header) caps |= proto::kCapNextHeaderSize;
  if (options_.zero_pages) caps |= proto::kCapZeroPages;
  if (options_.compression != Compression::kOff) {
    caps |= proto::kCapCompressedPages;
  }
  if (options_.verify != VerifyMode::kReread) {
    caps |= proto::kCapArrivalDigests;
  }
  if (Has(channels::kCapChunkedRegistration)) {
    if (options_.rdma_pin_all) caps |= proto::kCapRdmaPinAll;
    if (options_.rdma_reg_batch) caps |= proto::kCapRdmaRegBatch;
  }
  return caps;
}

absl::StatusOr<std::unique_ptr<channels::Transport>> SenderImpl::OpenChannel(
    const proto::Hello& hello, const channels::TransportOptions& topts,
    absl::Time deadline) {
  channels::ConnectSpec spec;
  spec.host = options_.host;
  spec.port = options_.port;
  spec.options = topts;
  spec.auth_key = options_.auth_key;
  spec.deadline = deadline;
  spec.session_capabilities = capabilities_;
  spec.chunk_bytes = options_.rdma_chunk_bytes;
  spec.max_inline = options_.rdma_max_inline;
  spec.connect_timeout = options_.handshake_timeout;
  absl::StatusOr<channels::DialedChannel> d =
      channels::DialChannel(channel_kind_, spec, hello);
  if (!d.ok()) return d.status();
  return engine::DecorateTransport(
      std::move(d->transport),
      {.source = true, .channel = hello.channel_index, .fd = d->socket_fd});
}

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
      bool expected;
      {
        std::unique_lock<std::mutex> lock(mu_);
        expected = finish_acked_;
      }
      // Recorded before control_closed_ wakes a waiting caller, so the
      // caller reports this cause rather than a bare "control connection
      // closed" of its own.
      if (!expected) {
        failure_.Fail(absl::UnavailableError(
            absl::StrCat("lost the control connection to the destination: ",
                         m.status().message())));
      }
      std::unique_lock<std::mutex> lock(mu_);
      control_closed_ = true;
      cv_.notify_all();
      return;
    }
    absl::Status bad;
    switch (m->type) {
      case proto::ControlType::kRoundDone: {
        absl::StatusOr<proto::RoundDone> d = proto::DecodeRoundDone(m->payload);
        if (!d.ok()) {
          bad = d.status();
          break;
        }
        std::unique_lock<std::mutex> lock(mu_);
        if (d->round != confirmed_rounds_) {
          bad = absl::InvalidArgumentError(absl::StrFormat(
              "destination confirmed round %d; round %d was next", d->round,
              confirmed_rounds_));
          break;
        }
        confirmed_rounds_ = d->round + 1;
        confirmed_pages_.push_back(d->pages);
        confirmed_mirror_.store(confirmed_rounds_, std::memory_order_release);
        cv_.notify_all();
        break;
      }
      case proto::ControlType::kHeartbeat:
        bad = proto::DecodeEmpty(m->type, m->payload);
        break;
      case proto::ControlType::kFinishAck: {
        bad = proto::DecodeEmpty(m->type, m->payload);
        std::unique_lock<std::mutex> lock(mu_);
        finish_acked_ = true;
        cv_.notify_all();
        break;
      }
      case proto::ControlType::kVerifyResult: {
        absl::StatusOr<proto::VerifyResult> v =
            proto::DecodeVerifyResult(m->payload);
        if (!v.ok()) {
          bad = v.status();
          break;
        }
        std::unique_lock<std::mutex> lock(mu_);
        verify_results_.push_back(std::move(*v));
        cv_.notify_all();
        break;
      }
      case proto::ControlType::kChannelLost: {
        absl::StatusOr<proto::ChannelLoss> l =
            proto::DecodeChannelLoss(m->type, m->payload);
        if (!l.ok()) {
          bad = l.status();
          break;
        }
        if (!survive_ || l->channel >= channels_.size()) {
          bad = absl::InvalidArgumentError(absl::StrFormat(
              "CHANNEL_LOST for channel %d (%d channels%s)", l->channel,
              channels_.size(), survive_ ? "" : ", not surviving losses"));
          break;
        }
        absl::Status cause = proto::ChannelLossStatus(*l);
        OnChannelLoss(
            l->channel,
            absl::Status(cause.code(),
                         absl::StrFormat("destination lost it in round %d: %s",
                                         l->round, cause.message())));
        break;
      }
      case proto::ControlType::kChannelGoneAck: {
        absl::StatusOr<proto::ChannelGoneAck> a =
            proto::DecodeChannelGoneAck(m->payload);
        if (!a.ok()) {
          bad = a.status();
          break;
        }
        std::unique_lock<std::mutex> lock(mu_);
        if (!survive_ || a->channel >= channels_.size() ||
            gone_acks_.contains(a->channel)) {
          bad = absl::InvalidArgumentError(absl::StrFormat(
              "unexpected CHANNEL_GONE_ACK for channel %d", a->channel));
          break;
        }
        gone_acks_[a->channel] = a->round;
        cv_.notify_all();
        break;
      }
      case proto::ControlType::kError: {
        absl::StatusOr<proto::ErrorMessage> e = proto::DecodeError(m->payload);
        if (!e.ok()) {
          bad = e.status();
          break;
        }
        absl::Status peer(absl::Status(
            static_cast<absl::StatusCode>(e->code),
            absl::StrCat("destination reported",
                         e->channel == proto::kNoChannel
                             ? ""
                             : absl::StrFormat(" (channel %d)", e->channel),
                         ": ", e->text)));
        {
          std::unique_lock<std::mutex> lock(mu_);
          peer_error_ = peer;
          cv_.notify_all();
        }
        failure_.Fail(peer, engine::Origin::kPeer);
        break;
      }
      default:
        bad = absl::InvalidArgumentError(
            absl::StrCat("unexpected control message ",
                         proto::ControlTypeName(m->type), " from destination"));
    }
    if (!bad.ok()) {
      failure_.Fail(Annotate(bad, "control connection"));
      return;
    }
  }
}

void SenderImpl::OnFailure(const absl::Status& status, engine::Origin origin) {
  // The reason goes out before the sockets close, so the destination can
  // tell the cause from the echo (its channels seeing EOF).
  if (control_ != nullptr && origin == engine::Origin::kLocal) {
    control_->TrySend(proto::EncodeError(proto::MakeErrorMessage(status)),
                      absl::Seconds(1));
  }
  for (auto& c : channels_) {
    c->ring().Abort();
    c->transport().Shutdown();
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.notify_all();
}

absl::Status SenderImpl::FinalStatus() {
  absl::Status local = failure_.status();
  const bool local_is_peers = failure_.origin() == engine::Origin::kPeer;
  std::optional<absl::Status> peer;
  uint64_t confirmed;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Read the destination's last word before closing the control
    // connection: its ERROR (a local echo, such as a reset after the
    // destination refused a packet, is not the cause), or its close once
    // it learned of our failure; every RoundDone it sent comes before
    // either. Stopping at a local error without it could drop a RoundDone
    // already on the wire, and confirmed_rounds() would then miss a round
    // the destination confirmed. Short unless the destination is stalled.
    const auto until = std::chrono::steady_clock::now() +
                       absl::ToChronoNanoseconds(engine::kRootCauseGrace);
    cv_.wait_until(lock, until, [&] {
      return local_is_peers || peer_error_ || control_closed_;
    });
    peer = peer_error_;
    confirmed = confirmed_rounds_;
  }
  if (control_ != nullptr) control_->Shutdown();
  absl::Status s = local_is_peers ? local
                                  : engine::PreferRootCause(
                                        local, peer.value_or(absl::OkStatus()));
  return absl::Status(
      s.code(),
      absl::StrFormat("%s [destination confirmed %d round%s]", s.message(),
                      confirmed, confirmed == 1 ? "" : "s"));
}

template <typename Pred>
absl::Status SenderImpl::AwaitControl(Pred ready, absl::Duration timeout,
                                      const std::string& what) {
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  bool timed_out = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    timed_out = !cv_.wait_until(lock, deadline, [&] {
      return ready() || failure_.failed() || control_closed_;
    });
    if (ready()) return absl::OkStatus();
  }
  if (timed_out) {
    failure_.Fail(absl::DeadlineExceededError(
        absl::StrFormat("%s: no answer from the destination within %s", what,
                        absl::FormatDuration(timeout))));
  } else if (!failure_.failed()) {
    failure_.Fail(absl::UnavailableError(
        absl::StrCat(what, ": control connection closed")));
  }
  return FinalStatus();
}

absl::Status SenderImpl::Barrier(CommandType type, uint64_t round) {
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (lost_[i]) continue;
    ChannelSender& c = *channels_[i];
    const uint32_t seq = c.ring().PushBarrier(type, round);
    // Aborted: the session failed, or (surviving losses) this channel
    // died and its loss is queued.
    if (seq == 0) {
      if (!survive_ || failure_.failed()) return FinalStatus();
      continue;
    }
    last_seq_[i] = seq;
    if (options_.single_thread && !c.DrainInline().ok()) {
      return FinalStatus();
    }
  }
  return AwaitRings();
}

absl::Status SenderImpl::AwaitRings() {
  while (true) {
    for (size_t i = 0; i < channels_.size(); ++i) {
      if (lost_[i] || last_seq_[i] == 0) continue;
      if (!channels_[i]->ring().WaitBarrier(last_seq_[i])) {
        if (!survive_ || failure_.failed()) return FinalStatus();
        // The channel died: a ChannelSender queues its loss before it
        // aborts the ring, so HandleLosses below sees it.
      }
    }
    if (failure_.failed()) return FinalStatus();
    if (!survive_ || !LossPending()) return absl::OkStatus();
    if (absl::Status s = HandleLosses(); !s.ok()) return s;
  }
}

void SenderImpl::OnChannelLoss(uint32_t channel, const absl::Status& cause) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    pending_losses_.emplace_back(channel, cause);
    cv_.notify_all();
  }
  // Queued first: a producer woken by the abort finds the loss. The
  // channel stops now, not when the caller thread gets to it: when only
  // the destination saw the death, the channel's sends may block on a
  // peer that no longer reads, with the producer waiting on its ring.
  ChannelSender& c = *channels_[channel];
  c.ring().Abort();
  c.transport().Shutdown();
}

bool SenderImpl::LossPending() {
  std::unique_lock<std::mutex> lock(mu_);
  return !pending_losses_.empty();
}

absl::Status SenderImpl::HandleLosses() {
  while (true) {
    std::pair<uint32_t, absl::Status> loss;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (pending_losses_.empty()) return absl::OkStatus();
      loss = std::move(pending_losses_.front());
      pending_losses_.pop_front();
    }
    // Both ends may see the same death; the first word counts.
    if (lost_[loss.first]) continue;
    if (absl::Status s = DeclareGone(loss.first, loss.second); !s.ok()) {
      return s;
    }
  }
}

// Why re-sending is enough for the destination to end each round
// byte-identical:
//  - The channel's thread here is joined before anything is re-sent, and
//    the destination stops (joins) its receive thread for the channel
//    before it answers CHANNEL_GONE, and before the round can complete
//    without it. So no packet of the dead channel is applied after the
//    round is confirmed: a page re-sent in a later round cannot be
//    overwritten by a stale copy.
//  - Within the round, a page of the dead channel may land twice (the
//    original, perhaps in part, and the re-sent copy, on another
//    channel's thread), in either order. Both copies were read from the
//    source after the page's dirty bit was taken for this round. In the
//    final round of a migration the workload is paused, so the two are
//    the same bytes and any interleaving leaves the source's page. In an
//    earlier round, a page that changed between the two reads was written
//    after its bit was taken, so dirty tracking marked it again: it goes
//    in the next round, which the round barrier orders after this one.
//  - Every page of the round is counted once at the destination: the
//    dead channel's pages in the round no longer count there, and its
//    whole share is re-sent (SentLedger), so the pages the destination
//    confirms still equal the pages scheduled.
absl::Status SenderImpl::DeclareGone(uint32_t channel,
                                     const absl::Status& cause) {
  lost_[channel] = true;
  ChannelSender& dead = *channels_[channel];
  dead.ring().Abort();
  dead.transport().Shutdown();
  dead.Join();
  uint64_t declared;
  std::string losses;
  {
    std::unique_lock<std::mutex> lock(mu_);
    declared = confirmed_rounds_;
    losses_.push_back({channel, declared, std::string(cause.message())});
    losses = DescribeChannelLosses(losses_);
  }
  if (std::count(lost_.begin(), lost_.end(), false) == 0) {
    failure_.Fail(absl::UnavailableError(
        absl::StrFormat("all %d channels lost: %s", channels_.size(), losses)));
    return FinalStatus();
  }
  proto::ChannelLoss gone;
  gone.channel = channel;
  gone.round = declared;
  gone.code = static_cast<uint16_t>(cause.code());
  gone.text = std::string(cause.message());
  if (absl::Status s = control_->Send(proto::EncodeChannelGone(gone));
      !s.ok()) {
    failure_.Fail(s);
    return FinalStatus();
  }
  if (absl::Status s = AwaitControl(
          [&] { return gone_acks_.contains(channel); }, options_.stall_timeout,
          absl::StrFormat("declaring channel %d gone", channel));
      !s.ok()) {
    return s;
  }
  uint64_t effective;
  {
    std::unique_lock<std::mutex> lock(mu_);
    effective = gone_acks_[channel];
    // Reported as the round the session went on without the channel, as
    // the destination reports it.
    for (ChannelLoss& l : losses_) {
      if (l.channel == channel) l.round = effective;
    }
  }
  if (effective != declared && effective != declared + 1) {
    failure_.Fail(absl::InvalidArgumentError(absl::StrFormat(
        "destination put channel %d gone as of round %d; it was declared "
        "gone as of round %d",
        channel, effective, declared)));
    return FinalStatus();
  }
  // The destination completed the declared round with this channel's SYNC
  // before the declaration arrived: nothing of that round is missing.
  if (open_round_ && effective == *open_round_) {
    absl::StatusOr<engine::Scheduler::Scheduled> again =
        scheduler_->ScheduleRound(ledger_->Of(channel), effective);
    if (!again.ok()) {
      // Every live ring was aborted: their losses are queued, and the
      // last of them ends the session.
      if (failure_.failed()) return FinalStatus();
    } else {
      std::unique_lock<std::mutex> lock(mu_);
      resent_pages_ += again->pages;
    }
  }
  ledger_->Clear(channel);
  // The destination now waits for one more SYNC of the round from each
  // live channel (none comes after FINISH: no round follows).
  if (!finishing_) {
    for (size_t i = 0; i < channels_.size(); ++i) {
      if (lost_[i]) continue;
      if (uint32_t seq =
              channels_[i]->ring().PushBarrier(CommandType::kSync, effective);
          seq != 0) {
        last_seq_[i] = seq;
      }
    }
  }
  return absl::OkStatus();
}

std::vector<std::vector<proto::ZeroRange>> SenderImpl::UntouchedRanges(
    uint64_t round) {
  if (round != 0 || !options_.skip_untouched || survive_ ||
      (capabilities_ & proto::kCapZeroPages) == 0 ||
      options_.packet_pages < 2) {
    return {};
  }
  std::vector<std::vector<proto::ZeroRange>> all(regions_.size());
  for (size_t r = 0; r < regions_.size(); ++r) {
    // Best effort: a region the kernel cannot describe is sent in full
    // (its zero pages still go as offsets).
    absl::StatusOr<std::vector<engine::ByteRange>> found =
        engine::FindUntouchedRanges(regions_[r]);
    if (!found.ok()) continue;
    all[r].reserve(found->size());
    for (const engine::ByteRange& b : *found) {
      all[r].push_back({b.offset, b.length});
    }
  }
  return all;
}

absl::StatusOr<RoundResult> SenderImpl::SendRound(
    absl::Span<DirtyBitmap* const> dirty) {
  if (finished_) return absl::FailedPreconditionError("session is finished");
  if (failure_.failed()) return FinalStatus();
  if (!started_.empty()) {
    return absl::FailedPreconditionError(
        "SendRound with started rounds not awaited: AwaitRound them first");
  }
  const absl::Time start = absl::Now();
  const uint64_t round = next_round_;
  if (survive_) {
    ledger_->ClearAll();
    open_round_ = round;
    // Losses since the last round: their extra SYNCs belong to this one.
    if (absl::Status s = HandleLosses(); !s.ok()) return s;
  }
  absl::StatusOr<engine::Scheduler::Scheduled> sent =
      scheduler_->ScheduleRound(dirty, round, UntouchedRanges(round));
  if (!sent.ok()) {
    if (failure_.failed()) return FinalStatus();
    if (absl::IsAborted(sent.status()) && survive_) {
      // Every channel died while scheduling: declaring them ends it.
      if (absl::Status s = HandleLosses(); !s.ok()) return s;
      return FinalStatus();
    }
    return sent.status();  // a bad argument: nothing was taken
  }
  if (absl::Status s = Barrier(CommandType::kSync, round); !s.ok()) return s;
  const absl::Time deadline = absl::Now() + options_.round_timeout;
  while (true) {
    if (absl::Status s = AwaitControl(
            [&] {
              return confirmed_rounds_ > round || !pending_losses_.empty();
            },
            std::max(deadline - absl::Now(), absl::ZeroDuration()),
            absl::StrFormat("round %d", round));
        !s.ok()) {
      return s;
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (confirmed_rounds_ > round) break;
    }
    // A channel died before the destination confirmed the round.
    if (absl::Status s = HandleLosses(); !s.ok()) return s;
    if (absl::Status s = AwaitRings(); !s.ok()) return s;
  }
  open_round_.reset();
  if (absl::Status s = CheckApplied(round, sent->pages); !s.ok()) return s;
  ++next_round_;
  return RoundResult{round, sent->pages, sent->bytes, absl::Now() - start};
}

absl::Status SenderImpl::CheckApplied(uint64_t round, uint64_t sent_pages) {
  uint64_t applied;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (confirmed_pages_.empty()) {
      return absl::InternalError(
          absl::StrFormat("round %d confirmed without a page count", round));
    }
    applied = confirmed_pages_.front();
    confirmed_pages_.pop_front();
  }
  if (applied != sent_pages) {
    failure_.Fail(absl::DataLossError(absl::StrFormat(
        "round %d: destination applied %d pages, source sent %d", round,
        applied, sent_pages)));
    return FinalStatus();
  }
  return absl::OkStatus();
}

absl::Status SenderImpl::StartRound(absl::Span<DirtyBitmap* const> dirty) {
  if (finished_) return absl::FailedPreconditionError("session is finished");
  if (failure_.failed()) return FinalStatus();
  // Re-sending a lost channel's batches needs the open round to be the
  // only one: rounds go one at a time, the result kept for AwaitRound.
  if (survive_) {
    if (absl::Status s = AwaitStartedRounds(); !s.ok()) return s;
    absl::StatusOr<RoundResult> r = SendRound(dirty);
    if (!r.ok()) return r.status();
    started_.push_back({r->round, r->pages, r->bytes, absl::Now(), *r});
    return absl::OkStatus();
  }
  const absl::Time start = absl::Now();
  const uint64_t round = next_round_;
  absl::StatusOr<engine::Scheduler::Scheduled> sent =
      scheduler_->ScheduleRound(dirty, round, UntouchedRanges(round));
  if (!sent.ok()) {
    if (failure_.failed()) return FinalStatus();
    return sent.status();  // a bad argument: nothing was taken
  }
  // The SYNCs ride the rings behind the round's batches; the next round's
  // batches may follow them at once: the destination holds every channel
  // at its SYNC until all arrived, so no page of the next round lands
  // before this round's copy of it.
  for (size_t i = 0; i < channels_.size(); ++i) {
    ChannelSender& c = *channels_[i];
    const uint32_t seq = c.ring().PushBarrier(CommandType::kSync, round);
    if (seq == 0) return FinalStatus();
    last_seq_[i] = seq;
    if (options_.single_thread && !c.DrainInline().ok()) return FinalStatus();
  }
  ++next_round_;
  started_.push_back({round, sent->pages, sent->bytes, start, std::nullopt});
  return absl::OkStatus();
}

absl::StatusOr<RoundResult> SenderImpl::AwaitRound() {
  if (started_.empty()) {
    return absl::FailedPreconditionError("no round was started");
  }
  const StartedRound r = started_.front();
  started_.pop_front();
  if (r.done.has_value()) return *r.done;
  if (absl::Status s = AwaitControl([&] { return confirmed_rounds_ > r.round; },
                                    options_.round_timeout,
                                    absl::StrFormat("round %d", r.round));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckApplied(r.round, r.pages); !s.ok()) return s;
  return RoundResult{r.round, r.pages, r.bytes, absl::Now() - r.start};
}

absl::Status SenderImpl::AwaitStartedRounds() {
  while (!started_.empty()) {
    if (absl::StatusOr<RoundResult> r = AwaitRound(); !r.ok()) {
      return r.status();
    }
  }
  return absl::OkStatus();
}

absl::Status SenderImpl::StartVerify() {
  if (finished_) return absl::FailedPreconditionError("session is finished");
  if (sent_digests_ != nullptr || local_digests_ != nullptr) {
    return absl::OkStatus();  // nothing to read, or already started
  }
  absl::StatusOr<std::unique_ptr<engine::BackgroundDigests>> d =
      engine::BackgroundDigests::Start(regions_);
  if (!d.ok()) return d.status();
  local_digests_ = std::move(*d);
  return absl::OkStatus();
}

absl::StatusOr<VerifyReport> SenderImpl::Verify() {
  if (finished_) return absl::FailedPreconditionError("session is finished");
  if (failure_.failed()) return FinalStatus();
  if ((capabilities_ & proto::kCapVerify) == 0) {
    return absl::UnimplementedError("destination cannot verify pages");
  }
  if (absl::Status s = AwaitStartedRounds(); !s.ok()) return s;
  if (absl::Status s = StartVerify(); !s.ok()) return s;
  // A later Verify hashes memory again: it may have changed since.
  std::unique_ptr<engine::BackgroundDigests> local_digests =
      std::move(local_digests_);
  bool hashed = sent_digests_ != nullptr;
  // Requests stay this many pieces ahead of the comparison, so the
  // destination hashes while this side compares.
  constexpr int kWindow = 4;
  VerifyReport report;
  for (const Region& region : regions_) {
    const size_t index = static_cast<size_t>(&region - regions_.data());
    const uint64_t pages = region.page_count();
    uint64_t requested = 0;
    uint64_t compared = 0;
    int in_flight = 0;
    while (compared < pages) {
      while (in_flight < kWindow && requested < pages) {
        proto::VerifyRequest q{region.id, requested,
                               static_cast<uint32_t>(std::min<uint64_t>(
                                   proto::kMaxVerifyPages, pages - requested))};
        if (absl::Status s = control_->Send(proto::EncodeVerifyRequest(q));
            !s.ok()) {
          failure_.Fail(s);
          return FinalStatus();
        }
        requested += q.page_count;
        ++in_flight;
      }
      if (absl::Status s =
              AwaitControl([&] { return !verify_results_.empty(); },
                           options_.round_timeout, "verify");
          !s.ok()) {
        return s;
      }
      proto::VerifyResult result;
      {
        std::unique_lock<std::mutex> lock(mu_);
        result = std::move(verify_results_.front());
        verify_results_.pop_front();
      }
      --in_flight;
      const uint64_t count =
          std::min<uint64_t>(proto::kMaxVerifyPages, pages - compared);
      if (result.region_id != region.id || result.first_page != compared ||
          result.page_digests.size() != count) {
        failure_.Fail(absl::InvalidArgumentError(absl::StrFormat(
            "verify result for region %d pages [%d, +%d) answers a request "
            "for region %d pages [%d, +%d)",
            result.region_id, result.first_page, result.page_digests.size(),
            region.id, compared, count)));
        return FinalStatus();
      }
      if (!hashed) {
        // Every core, while the destination answers the requests already
        // in flight.
        local_digests->Finish();
        hashed = true;
      }
      absl::Span<const uint64_t> mine =
          (sent_digests_ != nullptr ? *sent_digests_ : local_digests->digests())
              .region(index)
              .subspan(compared, count);
      for (uint64_t i = 0; i < count; ++i) {
        if (mine[i] == result.page_digests[i]) continue;
        ++report.pages_mismatched;
        if (report.first_mismatches.size() < 16) {
          report.first_mismatches.emplace_back(region.id, compared + i);
        }
      }
      report.pages_checked += count;
      compared += count;
    }
  }
  return report;
}

absl::Status SenderImpl::Finish() {
  if (finished_) return absl::OkStatus();
  if (failure_.failed()) return FinalStatus();
  if (absl::Status s = AwaitStartedRounds(); !s.ok()) return s;
  finishing_ = true;
  if (survive_) {
    if (absl::Status s = HandleLosses(); !s.ok()) return s;
  }
  if (absl::Status s = Barrier(CommandType::kFinish, next_round_); !s.ok()) {
    return s;
  }
  if (absl::Status s = control_->Send(proto::EncodeFinish()); !s.ok()) {
    failure_.Fail(s);
    return FinalStatus();
  }
  if (absl::Status s = AwaitControl([&] { return finish_acked_; },
                                    options_.round_timeout, "finish");
      !s.ok()) {
    return s;
  }
  finished_ = true;
  for (auto& c : channels_) c->Join();
  control_->Shutdown();
  heartbeat_->Stop();
  control_thread_.join();
  // Channels that died after their FINISH barrier: every round was
  // confirmed, so nothing was missing; they are still reported.
  std::unique_lock<std::mutex> lock(mu_);
  for (auto& [channel, cause] : pending_losses_) {
    if (lost_[channel]) continue;
    lost_[channel] = true;
    losses_.push_back({channel, next_round_, std::string(cause.message())});
  }
  pending_losses_.clear();
  return absl::OkStatus();
}

SessionStats SenderImpl::stats() const {
  SessionStats s;
  for (const auto& c : channels_) {
    s.channels.emplace_back();
    c->ExportStats(&s.channels.back());
  }
  s.rounds = confirmed_rounds();
  std::unique_lock<std::mutex> lock(mu_);
  s.channels_lost = losses_;
  for (const ChannelLoss& l : losses_) {
    if (l.channel < s.channels.size()) s.channels[l.channel].lost = 1;
  }
  s.resent_pages = resent_pages_;
  return s;
}

absl::StatusOr<std::unique_ptr<Sender>> Sender::Connect(
    const SessionOptions& options, absl::Span<const Region> regions) {
  auto impl = std::make_unique<SenderImpl>(options, regions);
  if (absl::Status s = impl->Setup(); !s.ok()) return s;
  return std::unique_ptr<Sender>(new Sender(std::move(impl)));
}

Sender::Sender(std::unique_ptr<SenderImpl> impl) : impl_(std::move(impl)) {}
Sender::~Sender() = default;

absl::StatusOr<RoundResult> Sender::SendRound(
    absl::Span<DirtyBitmap* const> dirty) {
  return impl_->SendRound(dirty);
}
absl::Status Sender::StartRound(absl::Span<DirtyBitmap* const> dirty) {
  return impl_->StartRound(dirty);
}
absl::StatusOr<RoundResult> Sender::AwaitRound() { return impl_->AwaitRound(); }
absl::Status Sender::StartVerify() { return impl_->StartVerify(); }
absl::StatusOr<VerifyReport> Sender::Verify() { return impl_->Verify(); }
absl::Status Sender::Finish() { return impl_->Finish(); }
void Sender::Abort(const absl::Status& reason) { impl_->Abort(reason); }
SessionStats Sender::stats() const { return impl_->stats(); }
uint64_t Sender::confirmed_rounds() const { return impl_->confirmed_rounds(); }
std::vector<std::string> Sender::warnings() const { return impl_->warnings(); }

}  // namespace ramferry
