// The source's end of an RDMA channel: packets go as RDMA WRITEs of the
// pages and a SEND of the header, the destination's control messages come
// in as receives; and ConnectRdma, which dials it.
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
#include "base/status_macros.h"
#include "channels/header_slots.h"
#include "channels/rdma/auth.h"
#include "channels/rdma/connection.h"
#include "channels/rdma/queue.h"
#include "channels/rdma/rdma.h"
#include "channels/rdma/registration.h"
#include "channels/rdma/transport_base.h"
#include "channels/transport_family.h"
#include "proto/auth.h"
#include "proto/rdma_control.h"

namespace ramferry::channels {
namespace {

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
    RAMFERRY_RETURN_IF_ERROR(PostPending());
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
      RAMFERRY_RETURN_IF_ERROR(PostPending());
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
    RAMFERRY_RETURN_IF_ERROR(queue_.PostRecv(index));
    if (!c.ok()) return c.status();
    switch (c->type) {
      case proto::RdmaControlType::kRegisterResult:
        results_.push_back(std::move(c->results));
        return absl::OkStatus();
      case proto::RdmaControlType::kRegionKeys:
        RAMFERRY_RETURN_IF_ERROR(chunks_.ApplyRegionKeys(c->region_keys));
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
      RAMFERRY_RETURN_IF_ERROR(queue_.SendControl(c));
      stats_.chunks_compressed.Add(c.chunks.size());
    }
    for (const std::vector<proto::ChunkRef>& batch : plan.register_batches) {
      proto::RdmaControl q;
      q.type = proto::RdmaControlType::kRegisterRequest;
      q.chunks = batch;
      RAMFERRY_RETURN_IF_ERROR(queue_.SendControl(q));
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
      RAMFERRY_RETURN_IF_ERROR(chunks_.ApplyKeys(q.chunks, keys));
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
    RAMFERRY_RETURN_IF_ERROR(AddPageWrites(p));
    AddHeaderSend(p);
    return PostChain();
  }

  // Appends to wrs_ and sges_ a WRITE for each piece of p's pages, except
  // the pieces of chunks that went as COMPRESS (ResolveChunks).
  absl::Status AddPageWrites(const Pending& p) {
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
    return bad;
  }

  // Appends to wrs_ and sges_ the SEND of p's header, from its slot.
  void AddHeaderSend(const Pending& p) {
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
  }

  // Posts wrs_, each with its entry of sges_, chained, in parts the send
  // queue holds; each part ends signalled.
  absl::Status PostChain() {
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
      RAMFERRY_RETURN_IF_ERROR(queue_.Post(
          &wrs_[first], static_cast<uint32_t>(end - first), last.wr_id, sends));
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

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectRdma(
    const std::string& host, uint16_t port, proto::Hello hello,
    const TransportOptions& options, RdmaConfig config, absl::string_view key,
    proto::HelloReply* reply) {
  RAMFERRY_RETURN_IF_ERROR(ProbeRdma());
  const std::string where =
      absl::StrFormat("RDMA connect to %s:%d", host, port);
  const absl::Time deadline = absl::Now() + config.connect_timeout;
  hello.auth = key.empty() ? proto::kAuthNone : proto::kAuthHmacSha256;
  uint8_t hello_bytes[proto::kHelloBytes];
  proto::EncodeHello(hello, absl::MakeSpan(hello_bytes));
  absl::StatusOr<std::unique_ptr<Connection>> conn =
      ResolveRoute(host, port, config.connect_timeout, deadline, where);
  if (!conn.ok()) return conn.status();
  RAMFERRY_RETURN_IF_ERROR(
      (*conn)->CreateQp(config, hello.session, RdmaDomain::End::kSource));
  Connection* c = conn->get();
  auto transport =
      std::make_unique<RdmaSourceTransport>(*std::move(conn), options, config);
  RAMFERRY_RETURN_IF_ERROR(transport->Init());
  RAMFERRY_ASSIGN_OR_RETURN(RdmaAccept accepted,
                            ConnectWithHello(*c, hello_bytes, deadline, where));
  // Nothing is sent to a destination that has not proven the key.
  RAMFERRY_RETURN_IF_ERROR(CheckDestination(key, hello_bytes, accepted));
  if (accepted.challenge.has_value()) {
    if (absl::Status s = transport->SendProof(
            SourceProof(key, hello_bytes, *accepted.challenge));
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(where,
                                                 ": sending the "
                                                 "authentication proof: ",
                                                 s.message()));
    }
  }
  transport->set_capabilities(accepted.reply.capabilities &
                              (proto::kFeatureRdmaPinAll |
                               proto::kFeatureRdmaRegBatch |
                               proto::kFeatureRdmaCredits));
  *reply = accepted.reply;
  return transport;
}

}  // namespace ramferry::channels
