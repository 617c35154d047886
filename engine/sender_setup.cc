// Session set-up: the control connection and its Hello, the region table,
// the data channels, and the threads that run the session.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/status_util.h"
#include "channels/channel_factory.h"
#include "channels/transport_family.h"
#include "engine/endpoint.h"
#include "engine/region_table.h"
#include "engine/sender_impl.h"
#include "engine/stream_seal.h"
#include "engine/transport_decorator.h"
#include "proto/packet.h"
#include "proto/page_delta.h"

namespace ramferry {
namespace {

// Whether the peer of connected socket `fd` has an address of this host
// (in this network namespace): loopback, or any interface's.
bool PeerOnThisHost(int fd) {
  sockaddr_storage peer{};
  socklen_t len = sizeof peer;
  if (fd < 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) {
    return false;
  }
  auto same = [](const sockaddr* a, const sockaddr_storage& b) {
    if (a->sa_family != b.ss_family) return false;
    if (a->sa_family == AF_INET) {
      return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
             reinterpret_cast<const sockaddr_in*>(&b)->sin_addr.s_addr;
    }
    return a->sa_family == AF_INET6 &&
           std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&b)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  };
  if (peer.ss_family == AF_INET &&
      (ntohl(reinterpret_cast<sockaddr_in*>(&peer)->sin_addr.s_addr) >> 24) ==
          127) {
    return true;
  }
  bool local = false;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return false;
  for (ifaddrs* i = ifs; i != nullptr && !local; i = i->ifa_next) {
    local = i->ifa_addr != nullptr && same(i->ifa_addr, peer);
  }
  freeifaddrs(ifs);
  return local;
}

}  // namespace

using base::Annotate;
using engine::ChannelSender;
using engine::CommandRing;
using engine::ControlChannel;

absl::Status SenderImpl::Setup() {
  RAMFERRY_RETURN_IF_ERROR(ValidateSession(options_, regions_));
  if (!options_.streams) {
    RAMFERRY_RETURN_IF_ERROR(engine::ValidateRegions(regions_));
  }
  RAMFERRY_ASSIGN_OR_RETURN(
      channels::ResolvedTransport resolved,
      channels::ResolveTransport(options_.transport,
                                 options_.fallback_to_tcp_zerocopy));
  terms_.channel_kind = resolved.kind;
  if (!resolved.warning.empty()) terms_.warnings.push_back(resolved.warning);
  terms_.transport_caps = channels::StaticCapabilities(terms_.channel_kind);
  terms_.seal = engine::SealModeFor(options_, terms_.transport_caps);
  terms_.session =
      terms_.resume ? terms_.resumed_session : engine::NewSessionId();
  RAMFERRY_RETURN_IF_ERROR(PlanDeltas());

  absl::StatusOr<int> fd = channels::ConnectWithRetry(
      options_.host, options_.port, options_.connect_timeout);
  if (!fd.ok()) return Annotate(fd.status(), "control connection");
  control_ = std::make_unique<ControlChannel>(*fd, options_.stall_timeout);
  const absl::Time deadline = absl::Now() + options_.handshake_timeout;
  RAMFERRY_RETURN_IF_ERROR(ExchangeControlHello(*fd, deadline));
  RAMFERRY_RETURN_IF_ERROR(AgreeRegions(deadline));
  if (options_.verify == VerifyMode::kSent) {
    RAMFERRY_ASSIGN_OR_RETURN(std::unique_ptr<engine::DigestTable> t,
                              engine::DigestTable::Create(regions_));
    sent_digests_ = std::move(t);
  }
  if (options_.verify == VerifyMode::kFull) {
    RAMFERRY_ASSIGN_OR_RETURN(std::unique_ptr<engine::FrozenDigests> f,
                              engine::FrozenDigests::Create(regions_));
    frozen_digests_ = std::move(f);
  }
  RAMFERRY_RETURN_IF_ERROR(CreateDeltaCache());
  RAMFERRY_RETURN_IF_ERROR(OpenChannels(deadline));
  if ((terms_.features & proto::kFeaturePostcopyUrgent) != 0) {
    RAMFERRY_RETURN_IF_ERROR(OpenUrgent(deadline));
  }
  // The destination answers the resumed control Hello with what it still
  // lacks, which the control thread hands to postcopy_.
  if (terms_.resume) postcopy_.BeginResume();
  StartThreads();
  return absl::OkStatus();
}

absl::Status SenderImpl::PlanDeltas() {
  if (options_.delta == Delta::kOff) return absl::OkStatus();
  if (Has(channels::kCapRemotePlacement)) {
    terms_.warnings.push_back(absl::StrFormat(
        "delta = %s not used: %s places pages in the destination's memory "
        "itself, where nothing applies a delta",
        DeltaName(options_.delta), TransportKindName(terms_.channel_kind)));
    return absl::OkStatus();
  }
  // One cache, for one page size; regions of another send their pages
  // whole (review F7: with auto, never a failure).
  const engine::DeltaPlan plan =
      engine::PlanDeltaCache(regions_, options_.delta_cache_bytes);
  if (plan.page_size == 0) {
    const std::string why = absl::StrJoin(plan.whole, "; ");
    if (options_.delta == Delta::kOn) {
      return absl::InvalidArgumentError(absl::StrCat(
          "delta = on: no region can send deltas: ", why,
          "; or migrate with delta = auto, which sends such pages whole, or "
          "off"));
    }
    terms_.warnings.push_back(absl::StrCat("delta = auto not used: ", why));
    return absl::OkStatus();
  }
  for (const std::string& whole : plan.whole) {
    terms_.warnings.push_back(absl::StrCat("delta: ", whole));
  }
  delta_page_size_ = plan.page_size;
  return absl::OkStatus();
}

absl::Status SenderImpl::CreateDeltaCache() {
  if (delta_page_size_ == 0) return absl::OkStatus();
  if ((terms_.features & proto::kFeatureDeltaPages) == 0) {
    return absl::FailedPreconditionError(
        "delta: the destination does not take delta-encoded pages (an older "
        "ramferry?); migrate with delta = off");
  }
  absl::StatusOr<std::unique_ptr<engine::DeltaCache>> cache =
      engine::DeltaCache::Create(options_.delta_cache_bytes, delta_page_size_);
  if (!cache.ok()) return Annotate(cache.status(), "delta cache");
  delta_cache_ = std::move(*cache);
  return absl::OkStatus();
}

absl::Status SenderImpl::ExchangeControlHello(int fd, absl::Time deadline) {
  proto::Hello hello;
  hello.role = proto::Role::kControl;
  hello.session = terms_.session;
  hello.channel_count = options_.channels;
  hello.capabilities = OfferedCapabilities();
  hello.max_packet_pages = options_.packet_pages;
  hello.transport = static_cast<uint16_t>(options_.transport);
  if (Has(channels::kCapChunkedRegistration)) {
    hello.rdma_chunk_bytes = options_.rdma_chunk_bytes;
  }
  proto::SealKeys keys;
  absl::StatusOr<proto::HelloReply> reply =
      channels::ExchangeHello(fd, hello, options_.auth_key, deadline, &keys);
  if (!reply.ok()) return Annotate(reply.status(), "control connection");
  terms_.features = reply->capabilities & proto::kKnownFeatures;
  // The destination grants the mode asked for or refuses; one that
  // answers otherwise does not seal the way this end will.
  if (absl::StatusOr<proto::SealMode> granted =
          proto::SealModeOf(terms_.features);
      !granted.ok() || *granted != terms_.seal) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "control connection: the destination did not grant protect = %s "
        "(an older ramferry?)",
        proto::SealModeName(terms_.seal)));
  }
  RAMFERRY_RETURN_IF_ERROR(engine::SealControl(
      terms_.seal, options_.auth_key.empty() ? nullptr : &keys,
      engine::SealEnd::kSource, *control_));
  if (terms_.resume && (terms_.features & proto::kFeaturePostcopyResume) == 0) {
    return absl::FailedPreconditionError(
        "post-copy resume: the destination did not take the session back");
  }
  if (options_.streams && (terms_.features & proto::kFeatureStreams) == 0) {
    return absl::FailedPreconditionError(
        "control connection: the destination does not carry streams (it "
        "needs streams = true, or --qemu; an older ramferry?)");
  }
  if (options_.postcopy && (terms_.features & proto::kFeaturePostcopy) == 0) {
    return absl::FailedPreconditionError(
        "postcopy: the destination does not allow post-copy; give it "
        "postcopy (--postcopy) too, or migrate without it");
  }
  if (options_.survive_channel_loss) {
    if ((terms_.features & proto::kFeatureSurviveChannelLoss) == 0) {
      return absl::FailedPreconditionError(
          "survive_channel_loss: the destination cannot survive channel loss "
          "(an older ramferry, or a transport it does not support it on)");
    }
    terms_.survive = true;
  }
  return absl::OkStatus();
}

absl::Status SenderImpl::AgreeRegions(absl::Time deadline) {
  engine::RegionTable table(regions_);
  RAMFERRY_RETURN_IF_ERROR(
      control_->Send(proto::EncodeRegionTable(table.Describe())));
  absl::StatusOr<std::vector<uint8_t>> payload = engine::ReceiveExpected(
      *control_, proto::ControlType::kRegionReply, deadline);
  if (!payload.ok()) return Annotate(payload.status(), "region table");
  RAMFERRY_ASSIGN_OR_RETURN(proto::RegionReply regions,
                            proto::DecodeRegionReply(*payload));
  if (!regions.accepted) {
    return absl::FailedPreconditionError(
        absl::StrCat("destination refused the region table: ", regions.reason));
  }
  return absl::OkStatus();
}

void SenderImpl::StartThreads() {
  std::vector<CommandRing*> rings;
  for (auto& c : channels_) rings.push_back(&c->ring());
  std::function<absl::Status(size_t)> drain;
  if (options_.single_thread) {
    drain = [this](size_t i) { return channels_[i]->DrainInline(); };
  }
  losses_.SetChannels(channels_.size());
  last_seq_.assign(channels_.size(), 0);
  for (size_t i = 0; i < channels_.size(); ++i) {
    streams_.push_mu.push_back(std::make_unique<std::mutex>());
  }
  if (terms_.survive) {
    ledger_ = std::make_unique<engine::SentLedger>(channels_.size(), regions_);
  }
  // A sealed payload may be copied to be sealed (review A3), and a delta
  // packet is built in a buffer of its own (review F8): bounded.
  uint64_t max_batch_bytes = 0;
  if (terms_.seal != proto::SealMode::kNone) {
    max_batch_bytes = engine::kMaxStagedPayloadBytes;
  }
  if (delta_cache_ != nullptr) {
    max_batch_bytes =
        max_batch_bytes == 0
            ? proto::kMaxDeltaPayloadBytes
            : std::min(max_batch_bytes, proto::kMaxDeltaPayloadBytes);
  }
  scheduler_ = std::make_unique<engine::Scheduler>(
      rings, regions_, options_.packet_pages, std::move(drain), ledger_.get(),
      max_batch_bytes);
  if (!options_.single_thread) {
    for (auto& c : channels_) c->Start();
  }
  heartbeat_ = std::make_unique<engine::HeartbeatSender>(
      control_.get(), engine::HeartbeatInterval(options_.stall_timeout));
  control_thread_ = std::thread([this] { ControlLoop(); });
}

absl::Status SenderImpl::OpenChannels(absl::Time deadline) {
  channels::TransportOptions topts;
  topts.max_header_bytes = proto::PacketHeaderBytes(options_.packet_pages);
  topts.header_slots = options_.header_slots;
  topts.completion = options_.completion;
  topts.stall_timeout = options_.stall_timeout;
  topts.registered_buffers = options_.registered_buffers;
  for (uint32_t i = 0; i < options_.channels; ++i) {
    const Endpoint endpoint = engine::ChannelEndpoint(options_, i);
    terms_.endpoints.push_back(
        engine::EndpointName(endpoint.host, endpoint.port));
    const std::string where =
        options_.channel_endpoints.empty()
            ? absl::StrFormat("channel %d", i)
            : absl::StrFormat("channel %d (to %s)", i, terms_.endpoints.back());
    absl::StatusOr<OpenedChannel> opened =
        OpenChannel(DataHello(i), endpoint, topts, deadline);
    if (!opened.ok()) return Annotate(opened.status(), where);
    for (const Region& r : regions_) {
      if (absl::Status s =
              opened->transport->RegisterRegion(r.id, r.base, r.length);
          !s.ok()) {
        return Annotate(s, where);
      }
    }
    ChannelSender::LossHandler on_loss;
    if (terms_.survive) {
      on_loss = [this](uint32_t c, const absl::Status& cause) {
        OnChannelLoss(c, cause);
      };
    }
    ChannelSender::Config config = ChannelConfig();
    config.peer_on_this_host = opened->peer_on_this_host;
    channels_.push_back(std::make_unique<ChannelSender>(
        i, std::move(opened->transport), regions_, config, &failure_,
        std::move(on_loss), std::move(opened->sealer)));
  }
  return absl::OkStatus();
}

proto::Hello SenderImpl::DataHello(uint32_t channel) const {
  proto::Hello hello;
  hello.role = proto::Role::kData;
  hello.session = terms_.session;
  hello.channel_index = channel;
  hello.channel_count = options_.channels;
  hello.capabilities = terms_.features;
  hello.max_packet_pages = options_.packet_pages;
  hello.transport = static_cast<uint16_t>(options_.transport);
  if (Has(channels::kCapChunkedRegistration)) {
    hello.rdma_chunk_bytes = options_.rdma_chunk_bytes;
  }
  return hello;
}

ChannelSender::Config SenderImpl::ChannelConfig() const {
  ChannelSender::Config config;
  config.ring_entries = options_.ring_entries;
  config.max_pages = options_.packet_pages;
  config.announce_next_header =
      (terms_.features & proto::kFeatureNextHeaderSize) != 0;
  config.sent_digests = sent_digests_.get();
  config.memory_frozen = &memory_frozen_;
  config.frozen_digests = frozen_digests_.get();
  config.limiter = &limiter_;
  config.zero_pages = (terms_.features & proto::kFeatureZeroPages) != 0;
  if ((terms_.features & proto::kFeatureCompressedPages) != 0) {
    config.compression = options_.compression;
    config.compression_level = options_.compression_level;
  }
  config.delta_cache = delta_cache_.get();
  config.delta = options_.delta;
  config.delta_allowed = &delta_allowed_;
  return config;
}

uint64_t SenderImpl::OfferedCapabilities() const {
  uint64_t caps = proto::kFeatureVerify;
  if (options_.survive_channel_loss) caps |= proto::kFeatureSurviveChannelLoss;
  if (options_.announce_next_header) caps |= proto::kFeatureNextHeaderSize;
  if (options_.zero_pages) caps |= proto::kFeatureZeroPages;
  if (options_.compression != Compression::kOff) {
    caps |= proto::kFeatureCompressedPages;
  }
  if (delta_page_size_ != 0) caps |= proto::kFeatureDeltaPages;
  if (options_.verify != VerifyMode::kReread) {
    caps |= proto::kFeatureArrivalDigests;
  }
  if (options_.streams) caps |= proto::kFeatureStreams;
  if (options_.postcopy) {
    caps |= proto::kFeaturePostcopy;
    if (terms_.resume) caps |= proto::kFeaturePostcopyResume;
    if (options_.postcopy_urgent_channel) {
      caps |= proto::kFeaturePostcopyUrgent;
    }
  }
  caps |= proto::SealFeature(terms_.seal);
  if (Has(channels::kCapChunkedRegistration)) {
    if (options_.rdma_pin_all) caps |= proto::kFeatureRdmaPinAll;
    if (options_.rdma_reg_batch) caps |= proto::kFeatureRdmaRegBatch;
    caps |= proto::kFeatureRdmaCredits;
  }
  return caps;
}

absl::StatusOr<SenderImpl::OpenedChannel> SenderImpl::OpenChannel(
    const proto::Hello& hello, const Endpoint& endpoint,
    const channels::TransportOptions& topts, absl::Time deadline) {
  channels::ConnectSpec spec;
  spec.host = endpoint.host;
  spec.port = endpoint.port;
  spec.options = topts;
  spec.auth_key = options_.auth_key;
  spec.deadline = deadline;
  spec.session_capabilities = terms_.features;
  spec.chunk_bytes = options_.rdma_chunk_bytes;
  spec.max_inline = options_.rdma_max_inline;
  spec.connect_timeout = options_.handshake_timeout;
  RAMFERRY_ASSIGN_OR_RETURN(
      channels::DialedChannel d,
      channels::DialChannel(terms_.channel_kind, spec, hello));
  absl::StatusOr<std::unique_ptr<proto::Sealer>> sealer =
      engine::MakeChannelSealer(terms_.seal, d.keys ? &*d.keys : nullptr,
                                engine::SealEnd::kSource);
  if (!sealer.ok()) return sealer.status();
  OpenedChannel opened;
  opened.sealer = std::move(*sealer);
  opened.peer_on_this_host = PeerOnThisHost(d.socket_fd);
  opened.transport = engine::DecorateTransport(
      std::move(d.transport),
      {.source = true, .channel = hello.channel_index, .fd = d.socket_fd});
  return opened;
}

}  // namespace ramferry
