// The destination's end of an RDMA channel: each packet one message
// received, its pages placed already, the source's control messages
// served on the way; and RdmaListener, which accepts it.
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
      RAMFERRY_RETURN_IF_ERROR(Start());
    }
    if (at_packet_boundary && cur_left_ > 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "RDMA message carries %d bytes beyond its packet", cur_left_));
    }
    size_t got = 0;
    while (got < buf.size()) {
      if (cur_left_ == 0) {
        RAMFERRY_RETURN_IF_ERROR(ReleaseCurrent());
        if (!at_packet_boundary || got > 0) {
          // A packet is one message: its end is the packet's end.
          return absl::InvalidArgumentError(absl::StrFormat(
              "packet truncated: its RDMA message ended after %d of %d "
              "bytes",
              got, buf.size()));
        }
        RAMFERRY_RETURN_IF_ERROR(NextPacketMessage());
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
    RAMFERRY_RETURN_IF_ERROR(queue_.ProgressArmed());
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
    RAMFERRY_RETURN_IF_ERROR(queue_.Release(m.index));
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
      RAMFERRY_RETURN_IF_ERROR(SendRegionKeys());
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
    RAMFERRY_ASSIGN_OR_RETURN(proto::RdmaControl c,
                              proto::DecodeRdmaControl(bytes));
    if (c.type == proto::RdmaControlType::kCompress) {
      return chunks_.MarkCompressed(c.chunks);
    }
    if (c.type != proto::RdmaControlType::kRegisterRequest) {
      return absl::InvalidArgumentError(
          absl::StrFormat("unexpected RDMA control type %d from the source",
                          static_cast<int>(c.type)));
    }
    proto::RdmaControl result;
    result.type = proto::RdmaControlType::kRegisterResult;
    absl::StatusOr<std::vector<proto::ChunkKey>> keys =
        chunks_.AnswerRegisterRequest(
            c.chunks,
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

absl::StatusOr<std::unique_ptr<RdmaListener>> RdmaListener::Listen(
    const std::string& host, uint16_t port, const TransportOptions& options,
    const RdmaConfig& config, absl::string_view key, Admit admit,
    Deliver deliver, Admit preview) {
  if (!key.empty()) {
    RAMFERRY_RETURN_IF_ERROR(proto::ValidateAuthKey(key));
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
  RAMFERRY_RETURN_IF_ERROR(impl->Listen(host, port));
  return std::unique_ptr<RdmaListener>(new RdmaListener(std::move(impl)));
}

RdmaListener::RdmaListener(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
RdmaListener::~RdmaListener() = default;
uint16_t RdmaListener::port() const { return impl_->port(); }
uint64_t RdmaListener::refused() const { return impl_->refused(); }
uint64_t RdmaListener::auth_failures() const { return impl_->auth_failures(); }

}  // namespace ramferry::channels
