#include "tests/conformance/early_slot_reuse.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "channels/transport.h"
#include "engine/transport_decorator.h"

namespace ramferry::conformance {
namespace {

class EarlyReuseTransport final : public channels::Transport {
 public:
  EarlyReuseTransport(std::unique_ptr<channels::Transport> inner,
                      std::atomic<uint64_t>* rewrites)
      : inner_(std::move(inner)), rewrites_(rewrites) {}

  TransportKind kind() const override { return inner_->kind(); }
  uint32_t capabilities() const override { return inner_->capabilities(); }

  absl::StatusOr<absl::Span<uint8_t>> AcquireHeader() override {
    absl::StatusOr<absl::Span<uint8_t>> h = inner_->AcquireHeader();
    if (h.ok()) current_ = h->data();
    Sync();
    return h;
  }

  absl::Status SendPacket(const channels::OutgoingPacket& packet) override {
    uint8_t* const slot = current_;
    // The transport handed this slot out again: it saw the completion of
    // the packet that used it before, so the kernel no longer holds it.
    if (slot == taken_) taken_ = nullptr;
    if (queued_ == slot) queued_ = nullptr;
    if (taken_ != nullptr && slot != nullptr && !packet.payload.empty()) {
      // The bug: this packet's header written into the slot of a packet
      // the kernel has taken, before that packet's completion was awaited.
      std::memcpy(taken_, slot, packet.header_bytes);
      rewrites_->fetch_add(1, std::memory_order_relaxed);
    }
    absl::Status s = inner_->SendPacket(packet);
    queued_ = slot;
    // sendmsg returned: the kernel has the packet. uring-zc only queued it.
    if (inner_->kind() == TransportKind::kTcpZeroCopy) taken_ = slot;
    Sync();
    return s;
  }

  absl::Status Submit() override { return HandedOver(inner_->Submit()); }
  absl::Status Flush() override { return HandedOver(inner_->Flush()); }

  absl::Status Poll() override {
    absl::Status s = inner_->Poll();
    Sync();
    return s;
  }
  absl::Duration idle_poll_interval() const override {
    return inner_->idle_poll_interval();
  }

  absl::Status RegisterRegion(uint32_t region_id, void* base,
                              uint64_t length) override {
    return inner_->RegisterRegion(region_id, base, length);
  }

  absl::Status ReadExact(absl::Span<uint8_t> buf,
                         bool at_packet_boundary) override {
    return inner_->ReadExact(buf, at_packet_boundary);
  }
  absl::Status ReadPayload(absl::Span<const iovec> dst) override {
    return inner_->ReadPayload(dst);
  }
  absl::Status ReadPayloadAndHeader(absl::Span<const iovec> dst,
                                    absl::Span<uint8_t> next_header) override {
    return inner_->ReadPayloadAndHeader(dst, next_header);
  }

  void Shutdown() override { inner_->Shutdown(); }

 private:
  // The engine reads stats() (not virtual) of the transport it holds, this
  // one: mirror the real transport's counters into it after every call
  // made on the channel's thread, the only writer of both. Every counter
  // only grows, sums and maxima alike.
  // After a Submit or Flush that returned `s`: on success everything
  // queued went to the kernel, the last of it now the slot taken.
  absl::Status HandedOver(absl::Status s) {
    if (s.ok() && queued_ != nullptr) taken_ = queued_;
    queued_ = nullptr;
    Sync();
    return s;
  }

  void Sync() {
    const channels::TransportStats& in = inner_->stats();
#define RAMFERRY_SYNC_FIELD(field, merge, json, doc)             \
  if (const uint64_t v = in.field.get(); v > stats_.field.get()) \
    stats_.field.Add(v - stats_.field.get());
    RAMFERRY_TRANSPORT_COUNTERS(RAMFERRY_SYNC_FIELD)
    RAMFERRY_RDMA_COUNTERS(RAMFERRY_SYNC_FIELD)
#undef RAMFERRY_SYNC_FIELD
  }

  std::unique_ptr<channels::Transport> inner_;
  std::atomic<uint64_t>* const rewrites_;
  uint8_t* current_ = nullptr;  // the slot AcquireHeader gave last
  uint8_t* queued_ = nullptr;   // the newest slot sent, maybe not submitted
  uint8_t* taken_ = nullptr;    // the newest slot the kernel has taken
};

}  // namespace

bool EarlySlotReuseRequested() {
  const char* v = std::getenv(kEarlySlotReuseEnv);
  return v != nullptr && std::string(v) == "1";
}

EarlySlotReuse::EarlySlotReuse() {
  engine::SetTransportDecoratorForTesting(
      [this](std::unique_ptr<channels::Transport> t,
             const engine::TransportSite& site)
          -> std::unique_ptr<channels::Transport> {
        if (!site.source) return t;
        return std::make_unique<EarlyReuseTransport>(std::move(t), &rewrites_);
      });
}

EarlySlotReuse::~EarlySlotReuse() {
  engine::SetTransportDecoratorForTesting(nullptr);
}

}  // namespace ramferry::conformance
