// What both ends of an RDMA channel share (rdma/source.cc,
// rdma/destination.cc): the connection, its queues, the regions and this
// side's registrations of them.
#ifndef RAMFERRY_CHANNELS_RDMA_TRANSPORT_BASE_H_
#define RAMFERRY_CHANNELS_RDMA_TRANSPORT_BASE_H_

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/status_macros.h"
#include "channels/rdma/connection.h"
#include "channels/rdma/queue.h"
#include "channels/rdma/rdma.h"
#include "channels/rdma/registration.h"
#include "channels/transport.h"
#include "channels/transport_family.h"
#include "proto/rdma_control.h"

namespace ramferry::channels {

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
    RAMFERRY_ASSIGN_OR_RETURN(RdmaDomain::Registered r,
                              conn_->domain->Whole(l.domain));
    Count(r);
    l.whole = r.mr;
    return l.whole;
  }

  // On demand: chunk `chunk` of region `id`, registered where nobody has.
  absl::StatusOr<ibv_mr*> ChunkMr(uint32_t id, uint64_t chunk) {
    RAMFERRY_ASSIGN_OR_RETURN(RdmaDomain::Registered r,
                              conn_->domain->Chunk(local_[id].domain, chunk));
    Count(r);
    return r.mr;
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

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_RDMA_TRANSPORT_BASE_H_
