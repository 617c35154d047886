// The two ends of an RDMA channel: RdmaSourceTransport and
// RdmaDestinationTransport over a small shared base. What they stand on:
// rdma_connection (verbs objects, the CM steps, the listener), rdma_queue
// (posts, completions, receives, control sends) and rdma_registration
// (which chunks need keys, which go as COMPRESS).
#include "channels/rdma.h"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "channels/header_slots.h"
#include "channels/rdma_auth.h"
#include "channels/rdma_connection.h"
#include "channels/rdma_queue.h"
#include "channels/rdma_registration.h"
#include "channels/transport_family.h"
#include "proto/auth.h"
#include "proto/rdma_control.h"

namespace ramferry::channels {

absl::Status ProbeRdma() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list != nullptr) ibv_free_device_list(list);
  if (n == 0) {
    return absl::FailedPreconditionError(
        "no RDMA device (ibv_get_device_list found none); add an RDMA NIC "
        "or a Soft-RoCE device (rdma link add rxe0 type rxe netdev eth0), "
        "or choose a TCP transport");
  }
  return absl::OkStatus();
}

uint64_t RdmaChannelBufferBytes(uint64_t max_header_bytes) {
  const uint64_t message =
      std::max<uint64_t>(max_header_bytes, proto::RdmaControlMaxBytes());
  return RdmaConfig{}.recv_queue * message +
         RdmaQueue::kControlBuffers * proto::RdmaControlMaxBytes();
}

namespace {

// What both ends share: the connection, its queues, the regions and this
// side's registrations of them.
class RdmaTransportBase : public Transport, protected RdmaQueue::Handler {
 public:
  // `region_access`: what a pin-all registration of a region allows.
  RdmaTransportBase(std::unique_ptr<Connection> conn,
                    const TransportOptions& options, const RdmaConfig& config,
                    int region_access)
      : conn_(std::move(conn)),
        options_(options),
        config_(config),
        region_access_(region_access),
        queue_(conn_.get(), config, options.stall_timeout,
               std::max(options.max_header_bytes, proto::RdmaControlMaxBytes()),
               &stats_, this),
        chunks_(config.chunk_bytes) {}

  // queue_'s MRs go first; conn_ (QP, CQ, the domain's reference, id)
  // last: the regions' registrations are the domain's, kept until the
  // session's last channel on this end is gone.
  ~RdmaTransportBase() override = default;

  // Registers the buffers it owns and posts every receive.
  virtual absl::Status Init() { return queue_.Init(); }

  TransportKind kind() const override { return TransportKind::kRdma; }
  uint32_t capabilities() const override { return StaticCapabilities(kind()); }

  absl::Status Poll() override { return queue_.Progress(); }

  // Pin-all: the session's first channel starts the whole region's
  // registration and returns; the first use waits for it. On the
  // destination it is what the source writes into; on the source what it
  // writes from.
  absl::Status RegisterRegion(uint32_t region_id, void* base,
                              uint64_t length) override {
    auto* bytes = static_cast<uint8_t*>(base);
    absl::StatusOr<RdmaDomain::Region*> r =
        conn_->domain->AddRegion(region_id, bytes, length, config_.chunk_bytes,
                                 region_access_, pin_all());
    if (!r.ok()) return r.status();
    chunks_.AddRegion(region_id, bytes, length);
    local_[region_id] = {*r, nullptr};
    return absl::OkStatus();
  }

  void Shutdown() override {
    queue_.Stop();
    // The QP goes to error: posted work flushes, every waiter wakes, and
    // the peer's access ends (at FINISH, on any failure) even where it
    // disconnected first and there is no disconnect to send.
    conn_->RevokeRemoteAccess();
    if (conn_->connected.exchange(false)) rdma_disconnect(conn_->id);
  }

 protected:
  // A region's registrations in the session's domain, and (pin-all) the
  // whole one once it has been waited for.
  struct LocalRegion {
    RdmaDomain::Region* domain = nullptr;
    ibv_mr* whole = nullptr;
  };

  // Counts a registration on this channel where this call made it.
  void Count(const RdmaDomain::Registered& r) {
    if (!r.made_now) return;
    stats_.chunks_registered.Add((r.bytes + config_.chunk_bytes - 1) /
                                 config_.chunk_bytes);
    stats_.rdma_register_ns.Add(absl::ToInt64Nanoseconds(r.took));
    stats_.rdma_registered_bytes.Add(r.bytes);
  }

  // Pin-all: region `id`'s whole registration, waited for the first time.
  absl::StatusOr<ibv_mr*> WholeMr(uint32_t id) {
    LocalRegion& l = local_[id];
    if (l.whole != nullptr) return l.whole;
    absl::StatusOr<RdmaDomain::Registered> r = conn_->domain->Whole(l.domain);
    if (!r.ok()) return r.status();
    Count(*r);
    l.whole = r->mr;
    return l.whole;
  }

  // On demand: chunk `chunk` of region `id`, registered where nobody has.
  absl::StatusOr<ibv_mr*> ChunkMr(uint32_t id, uint64_t chunk) {
    absl::StatusOr<RdmaDomain::Registered> r =
        conn_->domain->Chunk(local_[id].domain, chunk);
    if (!r.ok()) return r.status();
    Count(*r);
    return r->mr;
  }

  bool pin_all() const {
    return (config_.capabilities & proto::kFeatureRdmaPinAll) != 0;
  }

  std::unique_ptr<Connection> conn_;
  const TransportOptions options_;
  RdmaConfig config_;
  const int region_access_;
  RdmaQueue queue_;
  ChunkRegistry chunks_;
  std::map<uint32_t, LocalRegion> local_;
};

// What the source's memory is registered with: nothing beyond the local
// read every registration allows, since WRITEs and SENDs only read it.
// LOCAL_WRITE would have the kernel pin the pages as if for writing, which
// breaks their userfaultfd write protection: every registered page would
// read as dirty in the next round and be sent again.
constexpr int kSourceAccess = 0;

// The source: packets go as RDMA WRITEs and the header's SEND; the
// destination's control messages (REGISTER_RESULT, REGION_KEYS) come in as
// receives.
class RdmaSourceTransport final : public RdmaTransportBase,
                                  private CompletionSource {
 public:
  RdmaSourceTransport(std::unique_ptr<Connection> conn,
                      const TransportOptions& options, const RdmaConfig& config)
      : RdmaTransportBase(std::move(conn), options, config, kSourceAccess),
        slots_(options.header_slots, options.max_header_bytes,
               options.completion, this, &stats_) {}

  ~RdmaSourceTransport() override {
    if (slots_mr_ != nullptr) ibv_dereg_mr(slots_mr_);
  }

  absl::Status Init() override {
    slots_mr_ = ibv_reg_mr(conn_->pd, slots_.buffer(0).data(),
                           size_t{slots_.size()} * options_.max_header_bytes,
                           IBV_ACCESS_LOCAL_WRITE);
    if (slots_mr_ == nullptr) {
      return RdmaErrno("ibv_reg_mr of the channel's own buffers");
    }
    return RdmaTransportBase::Init();
  }

  // Keyed: the answer to the destination's challenge, the first SEND on
  // the QP, before any credit is counted (the destination grants its
  // receives only once the proof checked out, and has one posted for it).
  absl::Status SendProof(absl::Span<const uint8_t> proof) {
    return queue_.SendMessage(proof);
  }

  // What the destination's HelloReply granted.
  void set_capabilities(uint64_t caps) {
    config_.capabilities = caps;
    if ((caps & proto::kFeatureRdmaCredits) != 0) queue_.CountCredits();
  }

  absl::StatusOr<absl::Span<uint8_t>> AcquireHeader() override {
    return slots_.Acquire();
  }

  absl::Status SendPacket(const OutgoingPacket& packet) override {
    Pending p;
    p.slot = slots_.current();
    p.token = next_token_++;
    p.header_bytes = static_cast<uint32_t>(packet.header_bytes);
    p.region = packet.region_id;
    p.iov.assign(packet.payload.begin(), packet.payload.end());
    p.offsets.assign(packet.payload_offsets.begin(),
                     packet.payload_offsets.end());
    // The slot is held from now: it may not be rewritten before the post
    // that carries it completes.
    slots_.Attach(p.token);
    pending_.push_back(std::move(p));
    return slots_.PacketSent();
  }

  absl::Status Submit() override { return PostPending(); }

  absl::Status Flush() override {
    if (absl::Status s = PostPending(); !s.ok()) return s;
    return slots_.Flush();
  }

  absl::Status ReadExact(absl::Span<uint8_t>, bool) override {
    return absl::FailedPreconditionError(
        "an RDMA source channel receives no packets");
  }
  absl::Status ReadPayload(absl::Span<const iovec>) override {
    return absl::FailedPreconditionError(
        "an RDMA source channel receives no packets");
  }

 private:
  struct Pending {
    uint32_t slot = 0;
    uint32_t token = 0;
    uint32_t header_bytes = 0;
    uint32_t region = 0;
    std::vector<iovec> iov;
    std::vector<uint64_t> offsets;
    PageRuns pages() const { return {region, iov, offsets}; }
  };

  bool reg_batch() const {
    return (config_.capabilities & proto::kFeatureRdmaRegBatch) != 0;
  }

  // HeaderSlots waits through here: post what is queued, then wait.
  absl::Status Reap(HeaderSlots&, bool block) override {
    if (!pending_.empty() && !posting_) {
      if (absl::Status s = PostPending(); !s.ok()) return s;
    }
    if (!block) return queue_.Progress();
    const uint64_t before = queue_.completions();
    return queue_.WaitFor([&] { return queue_.completions() != before; },
                          options_.stall_timeout, "awaiting send completions");
  }

  absl::Status OnPacketSent(uint32_t token, bool zero_copy) override {
    return slots_.Complete(token, false, zero_copy);
  }

  // The destination's answers arrive as receives.
  absl::Status OnReceive(uint32_t index, uint32_t length) override {
    absl::StatusOr<proto::RdmaControl> c =
        proto::DecodeRdmaControl({queue_.message(index), length});
    if (absl::Status s = queue_.PostRecv(index); !s.ok()) {
      return s;
    }
    if (!c.ok()) return c.status();
    switch (c->type) {
      case proto::RdmaControlType::kRegisterResult:
        results_.push_back(std::move(c->results));
        return absl::OkStatus();
      case proto::RdmaControlType::kRegionKeys:
        if (absl::Status s = chunks_.ApplyRegionKeys(c->region_keys); !s.ok()) {
          return s;
        }
        region_keys_ = true;
        return absl::OkStatus();
      case proto::RdmaControlType::kCredits:
        return queue_.GrantCredits(c->credits);
      default:
        return absl::InvalidArgumentError(absl::StrFormat(
            "unexpected RDMA control type %d from the destination",
            static_cast<int>(c->type)));
    }
  }

  absl::StatusOr<ibv_mr*> LocalMr(uint32_t region, uint64_t chunk) {
    return pin_all() ? WholeMr(region) : ChunkMr(region, chunk);
  }

  // Chunks the destination has no key for: zero ones go as COMPRESS,
  // the rest are registered, many per round trip where both ends can.
  absl::Status ResolveChunks() {
    if (pin_all()) {
      // The keys come once the destination has registered its regions,
      // which takes as long as the regions are large (seconds a GiB is
      // possible): no stall timeout of this channel's fits every size.
      // What bounds the wait is the peer's liveness: its disconnect ends
      // it here, and a destination that stops (its heartbeats stop, or a
      // round is not confirmed in time) fails the session, whose Shutdown
      // ends it too.
      return queue_.WaitFor([&] { return region_keys_; },
                            absl::InfiniteDuration(),
                            "awaiting the destination's region keys");
    }
    runs_.clear();
    for (const Pending& p : pending_) runs_.push_back(p.pages());
    const RegistrationPlan plan =
        chunks_.Plan(runs_, reg_batch() ? proto::kMaxRdmaControlEntries : 1);
    for (const std::vector<proto::ChunkRef>& zero : plan.compress) {
      proto::RdmaControl c;
      c.type = proto::RdmaControlType::kCompress;
      c.chunks = zero;
      if (absl::Status s = queue_.SendControl(c); !s.ok()) return s;
      stats_.chunks_compressed.Add(c.chunks.size());
    }
    for (const std::vector<proto::ChunkRef>& batch : plan.register_batches) {
      proto::RdmaControl q;
      q.type = proto::RdmaControlType::kRegisterRequest;
      q.chunks = batch;
      if (absl::Status s = queue_.SendControl(q); !s.ok()) return s;
      if (absl::Status s = queue_.WaitFor([&] { return !results_.empty(); },
                                          options_.stall_timeout,
                                          "awaiting REGISTER_RESULT");
          !s.ok()) {
        return s;
      }
      std::vector<proto::ChunkKey> keys = std::move(results_.front());
      results_.pop_front();
      stats_.register_round_trips.Add();
      stats_.register_batch_max.RaiseTo(q.chunks.size());
      if (absl::Status s = chunks_.ApplyKeys(q.chunks, keys); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  absl::Status PostPending() {
    if (pending_.empty() || posting_) return absl::OkStatus();
    posting_ = true;
    absl::Status s = ResolveChunks();
    size_t done = 0;
    for (; s.ok() && done < pending_.size(); ++done) {
      s = PostPacket(pending_[done]);
    }
    pending_.erase(pending_.begin(), pending_.begin() + done);
    posting_ = false;
    return s;
  }

  // One packet, one ibv_post_send: a WRITE per piece, then the header's
  // SEND, signalled, so its completion says the whole chain is done. A
  // packet of more pieces than the send queue holds (sparse pages at the
  // largest packet sizes) goes in several posts, in order on the QP, each
  // but the last ending with a signalled WRITE.
  absl::Status PostPacket(const Pending& p) {
    wrs_.clear();
    sges_.clear();
    wrs_.reserve(p.iov.size() * 2 + 2);
    sges_.reserve(p.iov.size() * 2 + 2);
    absl::Status bad;
    chunks_.ForEachPiece(p.pages(), [&](const ChunkRegistry::Piece& piece) {
      const RdmaRegion& r = *piece.region;
      const uint64_t chunk = piece.chunk;
      const uint64_t off = piece.offset;
      const RemoteChunk& rc = r.remote[chunk];
      if (!pin_all() && rc.state == RemoteChunk::kZero) return;  // COMPRESS
      if (!bad.ok()) return;
      absl::StatusOr<ibv_mr*> local = LocalMr(p.region, chunk);
      if (!local.ok()) {
        bad = local.status();
        return;
      }
      sges_.push_back({reinterpret_cast<uint64_t>(piece.addr),
                       static_cast<uint32_t>(piece.length), (*local)->lkey});
      ibv_send_wr wr{};
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.wr_id = WrId(kPageWrite, p.token);
      if (pin_all()) {
        wr.wr.rdma.remote_addr = r.remote_addr + off;
        wr.wr.rdma.rkey = r.remote_rkey;
      } else {
        wr.wr.rdma.remote_addr = rc.addr + (off - chunk * config_.chunk_bytes);
        wr.wr.rdma.rkey = rc.rkey;
      }
      wrs_.push_back(wr);
    });
    if (!bad.ok()) return bad;
    uint8_t* header = slots_.buffer(p.slot).data();
    sges_.push_back(
        {reinterpret_cast<uint64_t>(header), p.header_bytes, slots_mr_->lkey});
    ibv_send_wr send{};
    send.opcode = IBV_WR_SEND;
    send.send_flags = IBV_SEND_SIGNALED;
    if (p.header_bytes <= conn_->max_inline) {
      send.send_flags |= IBV_SEND_INLINE;
      queue_.CountInline(p.header_bytes);
    }
    send.wr_id = WrId(p.iov.empty() ? kMarkerSend : kPacketSend, p.token);
    wrs_.push_back(send);
    if (!p.iov.empty()) stats_.zc_sends.Add();
    const size_t part = queue_.send_queue();
    for (size_t first = 0; first < wrs_.size(); first += part) {
      const size_t end = std::min(wrs_.size(), first + part);
      for (size_t i = first; i < end; ++i) {
        wrs_[i].sg_list = &sges_[i];
        wrs_[i].num_sge = 1;
        wrs_[i].next = i + 1 < end ? &wrs_[i + 1] : nullptr;
      }
      ibv_send_wr& last = wrs_[end - 1];
      last.send_flags |= IBV_SEND_SIGNALED;
      // Only the last part ends with the header's SEND.
      const uint32_t sends = end == wrs_.size() ? 1 : 0;
      if (absl::Status s =
              queue_.Post(&wrs_[first], static_cast<uint32_t>(end - first),
                          last.wr_id, sends);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  HeaderSlots slots_;
  ibv_mr* slots_mr_ = nullptr;
  std::vector<Pending> pending_;
  bool posting_ = false;
  uint32_t next_token_ = 0;
  std::deque<std::vector<proto::ChunkKey>> results_;
  bool region_keys_ = false;
  std::vector<ibv_send_wr> wrs_;
  std::vector<ibv_sge> sges_;
  std::vector<PageRuns> runs_;
};

// The destination (the consumer): each packet is one message received, its
// pages already placed; the source's control messages in between
// (REGISTER_REQUEST, COMPRESS) are served on the way.
class RdmaDestinationTransport final : public RdmaTransportBase,
                                       public SourceProofReader {
 public:
  RdmaDestinationTransport(std::unique_ptr<Connection> conn,
                           const TransportOptions& options,
                           const RdmaConfig& config)
      : RdmaTransportBase(std::move(conn), options, config,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) {}

  absl::StatusOr<absl::Span<uint8_t>> AcquireHeader() override {
    return absl::FailedPreconditionError(
        "an RDMA destination channel sends no packets");
  }
  absl::Status SendPacket(const OutgoingPacket&) override {
    return absl::FailedPreconditionError(
        "an RDMA destination channel sends no packets");
  }
  absl::Status Flush() override { return absl::OkStatus(); }

  absl::Status ReadExact(absl::Span<uint8_t> buf,
                         bool at_packet_boundary) override {
    if (!started_) {
      started_ = true;
      if (absl::Status s = Start(); !s.ok()) return s;
    }
    if (at_packet_boundary && cur_left_ > 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "RDMA message carries %d bytes beyond its packet", cur_left_));
    }
    size_t got = 0;
    while (got < buf.size()) {
      if (cur_left_ == 0) {
        if (absl::Status s = ReleaseCurrent(); !s.ok()) return s;
        if (!at_packet_boundary || got > 0) {
          // A packet is one message: its end is the packet's end.
          return absl::InvalidArgumentError(absl::StrFormat(
              "packet truncated: its RDMA message ended after %d of %d "
              "bytes",
              got, buf.size()));
        }
        if (absl::Status s = NextPacketMessage(); !s.ok()) return s;
        continue;
      }
      const size_t n = std::min(cur_left_, buf.size() - got);
      std::memcpy(buf.data() + got, cur_, n);
      cur_ += n;
      cur_left_ -= n;
      got += n;
    }
    stats_.recv_calls.Add();
    return absl::OkStatus();
  }

  // The pages were placed by RDMA WRITE before the header's SEND arrived
  // (one RC QP orders them): nothing to read, only the receive to return;
  // except pages in chunks the source announced as zero (COMPRESS), which
  // it did not write and which are zero-filled here.
  absl::Status ReadPayload(absl::Span<const iovec> dst) override {
    if (chunks_.zero_chunks() > 0) chunks_.ZeroFillCompressed(dst);
    return cur_left_ == 0 ? ReleaseCurrent() : absl::OkStatus();
  }

  // On the listener's thread, before delivery; only the first message is
  // looked at, and whatever the source sent after it waits in the inbox
  // for the channel's reader.
  absl::StatusOr<bool> TakeSourceProof(
      const proto::AuthMac& expected) override {
    if (absl::Status s = queue_.ProgressArmed(); !s.ok()) return s;
    if (inbox_.empty()) return false;
    const Message m = inbox_.front();
    inbox_.pop_front();
    if (absl::Status s =
            CheckSourceProof({queue_.message(m.index), m.length}, expected);
        !s.ok()) {
      return s;
    }
    // Before any grant: this posts the receive again, and no credit is
    // owed for it.
    if (absl::Status s = queue_.Release(m.index); !s.ok()) return s;
    return true;
  }

 private:
  struct Message {
    uint32_t index;
    uint32_t length;
  };
  static constexpr uint32_t kNoMessage = ~0u;

  // What the source waits for before its first WRITE or SEND: the keys
  // of pinned regions, and the receive credits where they are counted.
  absl::Status Start() {
    if (pin_all()) {
      if (absl::Status s = SendRegionKeys(); !s.ok()) return s;
    }
    if ((config_.capabilities & proto::kFeatureRdmaCredits) != 0) {
      return queue_.GrantReceiveQueue();
    }
    return absl::OkStatus();
  }

  // Returns the current message's receive buffer to the peer's credits.
  absl::Status ReleaseCurrent() {
    if (cur_index_ == kNoMessage) return absl::OkStatus();
    const uint32_t index = cur_index_;
    cur_index_ = kNoMessage;
    return queue_.Release(index);
  }

  absl::Status OnPacketSent(uint32_t, bool) override {
    return absl::InternalError("an RDMA destination channel sent a packet");
  }

  absl::Status OnReceive(uint32_t index, uint32_t length) override {
    inbox_.push_back({index, length});
    return absl::OkStatus();
  }

  // The next message that is a packet; control messages in
  // between are served on the way.
  absl::Status NextPacketMessage() {
    while (true) {
      if (absl::Status s =
              queue_.WaitFor([&] { return !inbox_.empty(); },
                             absl::InfiniteDuration(), "awaiting a packet");
          !s.ok()) {
        return s;
      }
      const Message m = inbox_.front();
      inbox_.pop_front();
      const uint8_t* data = queue_.message(m.index);
      if (!proto::IsRdmaControl({data, m.length})) {
        cur_ = data;
        cur_left_ = m.length;
        cur_index_ = m.index;
        return absl::OkStatus();
      }
      absl::Status s = ServeControl({data, m.length});
      if (absl::Status r = queue_.Release(m.index); !r.ok() && s.ok()) s = r;
      if (!s.ok()) return s;
    }
  }

  absl::Status ServeControl(absl::Span<const uint8_t> bytes) {
    absl::StatusOr<proto::RdmaControl> c = proto::DecodeRdmaControl(bytes);
    if (!c.ok()) return c.status();
    if (c->type == proto::RdmaControlType::kCompress) {
      return chunks_.MarkCompressed(c->chunks);
    }
    if (c->type != proto::RdmaControlType::kRegisterRequest) {
      return absl::InvalidArgumentError(
          absl::StrFormat("unexpected RDMA control type %d from the source",
                          static_cast<int>(c->type)));
    }
    proto::RdmaControl result;
    result.type = proto::RdmaControlType::kRegisterResult;
    absl::StatusOr<std::vector<proto::ChunkKey>> keys =
        chunks_.AnswerRegisterRequest(
            c->chunks,
            [&](const proto::ChunkRef& ref,
                absl::Span<uint8_t>) -> absl::StatusOr<uint32_t> {
              // ChunkSpan checked the reference: a region added here.
              absl::StatusOr<ibv_mr*> mr = ChunkMr(ref.region, ref.chunk);
              if (!mr.ok()) return mr.status();
              return (*mr)->rkey;
            });
    if (!keys.ok()) return keys.status();
    result.results = *std::move(keys);
    return queue_.SendControl(result);
  }

  // Waits for the whole registrations first (pin-all registers them
  // while the channels connect).
  absl::Status SendRegionKeys() {
    proto::RdmaControl keys;
    keys.type = proto::RdmaControlType::kRegionKeys;
    for (const auto& [id, r] : chunks_.regions()) {
      absl::StatusOr<ibv_mr*> mr = WholeMr(id);
      if (!mr.ok()) return mr.status();
      keys.region_keys.push_back(
          {id, (*mr)->rkey, reinterpret_cast<uint64_t>(r.base), r.length});
    }
    return queue_.SendControl(keys);
  }

  std::deque<Message> inbox_;
  const uint8_t* cur_ = nullptr;
  size_t cur_left_ = 0;
  uint32_t cur_index_ = kNoMessage;
  bool started_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectRdma(
    const std::string& host, uint16_t port, proto::Hello hello,
    const TransportOptions& options, RdmaConfig config, absl::string_view key,
    proto::HelloReply* reply) {
  if (absl::Status s = ProbeRdma(); !s.ok()) return s;
  const std::string where =
      absl::StrFormat("RDMA connect to %s:%d", host, port);
  const absl::Time deadline = absl::Now() + config.connect_timeout;
  hello.auth = key.empty() ? proto::kAuthNone : proto::kAuthHmacSha256;
  uint8_t hello_bytes[proto::kHelloBytes];
  proto::EncodeHello(hello, absl::MakeSpan(hello_bytes));
  absl::StatusOr<std::unique_ptr<Connection>> conn =
      ResolveRoute(host, port, config.connect_timeout, deadline, where);
  if (!conn.ok()) return conn.status();
  if (absl::Status s =
          (*conn)->CreateQp(config, hello.session, RdmaDomain::End::kSource);
      !s.ok()) {
    return s;
  }
  Connection* c = conn->get();
  auto transport =
      std::make_unique<RdmaSourceTransport>(*std::move(conn), options, config);
  if (absl::Status s = transport->Init(); !s.ok()) return s;
  absl::StatusOr<RdmaAccept> accepted =
      ConnectWithHello(*c, hello_bytes, deadline, where);
  if (!accepted.ok()) return accepted.status();
  // Nothing is sent to a destination that has not proven the key.
  if (absl::Status s = CheckDestination(key, hello_bytes, *accepted); !s.ok()) {
    return s;
  }
  if (accepted->challenge.has_value()) {
    if (absl::Status s = transport->SendProof(
            SourceProof(key, hello_bytes, *accepted->challenge));
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(where,
                                                 ": sending the "
                                                 "authentication proof: ",
                                                 s.message()));
    }
  }
  transport->set_capabilities(accepted->reply.capabilities &
                              (proto::kFeatureRdmaPinAll |
                               proto::kFeatureRdmaRegBatch |
                               proto::kFeatureRdmaCredits));
  *reply = accepted->reply;
  return transport;
}

absl::StatusOr<std::unique_ptr<RdmaListener>> RdmaListener::Listen(
    const std::string& host, uint16_t port, const TransportOptions& options,
    const RdmaConfig& config, absl::string_view key, Admit admit,
    Deliver deliver, Admit preview) {
  if (!key.empty()) {
    if (absl::Status s = proto::ValidateAuthKey(key); !s.ok()) return s;
  }
  auto impl = std::make_unique<Impl>(
      options, config, std::string(key), std::move(admit), std::move(deliver),
      std::move(preview),
      [](std::unique_ptr<Connection> conn, const TransportOptions& options,
         const RdmaConfig& config, AcceptedTransport* made) {
        auto transport = std::make_unique<RdmaDestinationTransport>(
            std::move(conn), options, config);
        absl::Status s = transport->Init();
        made->proof = transport.get();
        made->transport = std::move(transport);
        return s;
      });
  if (absl::Status s = impl->Listen(host, port); !s.ok()) return s;
  return std::unique_ptr<RdmaListener>(new RdmaListener(std::move(impl)));
}

RdmaListener::RdmaListener(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
RdmaListener::~RdmaListener() = default;
uint16_t RdmaListener::port() const { return impl_->port(); }
uint64_t RdmaListener::refused() const { return impl_->refused(); }
uint64_t RdmaListener::auth_failures() const { return impl_->auth_failures(); }

}  // namespace ramferry::channels
