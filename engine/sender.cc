#include "ramferry/sender.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "channels/rdma.h"
#include "engine/channel_sender.h"
#include "engine/control.h"
#include "engine/failure.h"
#include "engine/heartbeat.h"
#include "engine/region_table.h"
#include "engine/scheduler.h"
#include "engine/status_util.h"
#include "engine/transports.h"
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
  absl::StatusOr<std::unique_ptr<channels::Transport>> OpenSocketChannel(
      const proto::Hello& hello, const channels::TransportOptions& topts,
      absl::Time deadline, std::string* warning);
  absl::StatusOr<std::unique_ptr<channels::Transport>> OpenRdmaChannel(
      proto::Hello hello, const channels::TransportOptions& topts);
  void ControlLoop();
  void OnFailure(const absl::Status& status, engine::Origin origin);
  // The error to hand the caller once the session failed.
  absl::Status FinalStatus();
  // Pushes a barrier of `type` into every ring and waits for all of them.
  absl::Status Barrier(CommandType type, uint64_t round);
  // Waits (for at most `timeout`) until `ready()` holds under mu_, the
  // session fails, or the control connection closes.
  template <typename Pred>
  absl::Status AwaitControl(Pred ready, absl::Duration timeout,
                            const std::string& what);

  const SessionOptions options_;
  const absl::Span<const Region> regions_;
  engine::SessionFailure failure_;
  proto::SessionId session_;
  uint64_t capabilities_ = 0;
  std::unique_ptr<ControlChannel> control_;
  std::vector<std::unique_ptr<ChannelSender>> channels_;
  std::unique_ptr<engine::Scheduler> scheduler_;
  std::thread control_thread_;
  std::unique_ptr<engine::HeartbeatSender> heartbeat_;
  std::vector<std::string> warnings_;  // written during Setup only
  uint64_t next_round_ = 0;            // caller thread only
  bool finished_ = false;              // caller thread only

  // Events from the control thread.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  uint64_t confirmed_rounds_ = 0;
  uint64_t confirmed_pages_ = 0;
  bool finish_acked_ = false;
  bool control_closed_ = false;
  std::optional<absl::Status> peer_error_;
  std::deque<proto::VerifyResult> verify_results_;
  std::atomic<uint64_t> confirmed_mirror_{0};
};

absl::Status SenderImpl::Setup() {
  if (absl::Status s = ValidateOptions(options_); !s.ok()) return s;
  if (absl::Status s = engine::ValidateRegions(regions_); !s.ok()) return s;
  if (options_.transport == TransportKind::kRdma) {
    if (absl::Status s = channels::ProbeRdma(); !s.ok()) {
      return Annotate(s, "rdma");
    }
  }
  session_ = engine::NewSessionId();

  absl::StatusOr<int> fd = engine::ConnectWithRetry(
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
  if (options_.transport == TransportKind::kRdma) {
    hello.rdma_chunk_bytes = options_.rdma_chunk_bytes;
  }
  absl::StatusOr<proto::HelloReply> reply =
      engine::ExchangeHello(*fd, hello, options_.auth_key, deadline);
  if (!reply.ok()) return Annotate(reply.status(), "control connection");
  capabilities_ = reply->capabilities & proto::kKnownCapabilities;

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
  if (absl::Status s = OpenChannels(deadline); !s.ok()) return s;

  std::vector<CommandRing*> rings;
  for (auto& c : channels_) rings.push_back(&c->ring());
  std::function<absl::Status(size_t)> drain;
  if (options_.single_thread) {
    drain = [this](size_t i) { return channels_[i]->DrainInline(); };
  }
  scheduler_ = std::make_unique<engine::Scheduler>(
      rings, regions_, options_.packet_pages, std::move(drain));
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
    std::string warning;
    absl::StatusOr<std::unique_ptr<channels::Transport>> transport =
        options_.transport == TransportKind::kRdma
            ? OpenRdmaChannel(hello, topts)
            : OpenSocketChannel(hello, topts, deadline, &warning);
    if (!transport.ok()) return Annotate(transport.status(), where);
    if (!warning.empty() && i == 0) warnings_.push_back(warning);
    for (const Region& r : regions_) {
      if (absl::Status s = (*transport)->RegisterRegion(r.id, r.base, r.length);
          !s.ok()) {
        return Annotate(s, where);
      }
    }
    channels_.push_back(std::make_unique<ChannelSender>(
        i, std::move(*transport), regions_, options_.ring_entries,
        options_.packet_pages, &failure_));
  }
  return absl::OkStatus();
}

uint64_t SenderImpl::OfferedCapabilities() const {
  uint64_t caps = proto::kCapVerify;
  if (options_.transport == TransportKind::kRdma) {
    if (options_.rdma_pin_all) caps |= proto::kCapRdmaPinAll;
    if (options_.rdma_reg_batch) caps |= proto::kCapRdmaRegBatch;
  }
  return caps;
}

absl::StatusOr<std::unique_ptr<channels::Transport>>
SenderImpl::OpenSocketChannel(const proto::Hello& hello,
                              const channels::TransportOptions& topts,
                              absl::Time deadline, std::string* warning) {
  absl::StatusOr<int> fd = engine::ConnectWithRetry(
      options_.host, options_.port, options_.handshake_timeout);
  if (!fd.ok()) return fd.status();
  if (absl::StatusOr<proto::HelloReply> r =
          engine::ExchangeHello(*fd, hello, options_.auth_key, deadline);
      !r.ok()) {
    close(*fd);
    return r.status();
  }
  absl::StatusOr<std::unique_ptr<channels::Transport>> t =
      engine::OpenSocketTransport(options_.transport, *fd, topts,
                                  options_.fallback_to_tcp_zerocopy, warning);
  if (!t.ok()) return t;
  return engine::DecorateTransport(
      std::move(*t),
      {.source = true, .channel = hello.channel_index, .fd = *fd});
}

absl::StatusOr<std::unique_ptr<channels::Transport>>
SenderImpl::OpenRdmaChannel(proto::Hello hello,
                            const channels::TransportOptions& topts) {
  hello.rdma_chunk_bytes = options_.rdma_chunk_bytes;
  channels::RdmaConfig config;
  config.capabilities = capabilities_;
  config.chunk_bytes = options_.rdma_chunk_bytes;
  config.max_inline = options_.rdma_max_inline;
  config.connect_timeout = options_.handshake_timeout;
  proto::HelloReply reply;
  absl::StatusOr<std::unique_ptr<channels::Transport>> t =
      channels::ConnectRdma(options_.host, options_.port, hello, topts, config,
                            &reply);
  if (!t.ok()) return t;
  return engine::DecorateTransport(
      std::move(*t), {.source = true, .channel = hello.channel_index});
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
        confirmed_pages_ = d->pages;
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
  std::vector<uint32_t> seqs;
  seqs.reserve(channels_.size());
  for (auto& c : channels_) {
    uint32_t seq = c->ring().PushBarrier(type, round);
    if (seq == 0) return FinalStatus();
    seqs.push_back(seq);
    if (options_.single_thread && !c->DrainInline().ok()) {
      return FinalStatus();
    }
  }
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (!channels_[i]->ring().WaitBarrier(seqs[i])) return FinalStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<RoundResult> SenderImpl::SendRound(
    absl::Span<DirtyBitmap* const> dirty) {
  if (finished_) return absl::FailedPreconditionError("session is finished");
  if (failure_.failed()) return FinalStatus();
  const absl::Time start = absl::Now();
  const uint64_t round = next_round_;
  absl::StatusOr<engine::Scheduler::Scheduled> sent =
      scheduler_->ScheduleRound(dirty, round);
  if (!sent.ok()) {
    if (failure_.failed()) return FinalStatus();
    return sent.status();  // a bad argument: nothing was taken
  }
  if (absl::Status s = Barrier(CommandType::kSync, round); !s.ok()) return s;
  if (absl::Status s = AwaitControl([&] { return confirmed_rounds_ > round; },
                                    options_.round_timeout,
                                    absl::StrFormat("round %d", round));
      !s.ok()) {
    return s;
  }
  uint64_t applied;
  {
    std::unique_lock<std::mutex> lock(mu_);
    applied = confirmed_pages_;
  }
  if (applied != sent->pages) {
    failure_.Fail(absl::DataLossError(absl::StrFormat(
        "round %d: destination applied %d pages, source sent %d", round,
        applied, sent->pages)));
    return FinalStatus();
  }
  ++next_round_;
  return RoundResult{round, sent->pages, sent->bytes, absl::Now() - start};
}

absl::StatusOr<VerifyReport> SenderImpl::Verify() {
  if (finished_) return absl::FailedPreconditionError("session is finished");
  if (failure_.failed()) return FinalStatus();
  if ((capabilities_ & proto::kCapVerify) == 0) {
    return absl::UnimplementedError("destination cannot verify pages");
  }
  // Requests stay this many pieces ahead of the comparison, so the
  // destination hashes while this side compares.
  constexpr int kWindow = 4;
  VerifyReport report;
  std::vector<uint64_t> local(proto::kMaxVerifyPages);
  for (const Region& region : regions_) {
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
      auto mine = absl::MakeSpan(local.data(), count);
      engine::PageDigests(region, compared, mine);
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
  return absl::OkStatus();
}

SessionStats SenderImpl::stats() const {
  SessionStats s;
  for (const auto& c : channels_) {
    s.channels.emplace_back();
    c->ExportStats(&s.channels.back());
  }
  s.rounds = confirmed_rounds();
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
absl::StatusOr<VerifyReport> Sender::Verify() { return impl_->Verify(); }
absl::Status Sender::Finish() { return impl_->Finish(); }
void Sender::Abort(const absl::Status& reason) { impl_->Abort(reason); }
SessionStats Sender::stats() const { return impl_->stats(); }
uint64_t Sender::confirmed_rounds() const { return impl_->confirmed_rounds(); }
std::vector<std::string> Sender::warnings() const { return impl_->warnings(); }

}  // namespace ramferry
