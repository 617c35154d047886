#include "tests/support/faulty_transport.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "channels/socket_io.h"

namespace ramferry::testing {
namespace {

// The part of `iov` before byte `at`, and the part from it on, with the
// matching payload offsets (empty where the packet has none).
struct IovSplit {
  std::vector<iovec> head, tail;
  std::vector<uint64_t> head_offsets, tail_offsets;
};
IovSplit SplitIov(absl::Span<const iovec> iov,
                  absl::Span<const uint64_t> offsets, size_t at) {
  IovSplit s;
  const bool with_offsets = offsets.size() == iov.size();
  for (size_t i = 0; i < iov.size(); ++i) {
    const iovec& v = iov[i];
    const uint64_t off = with_offsets ? offsets[i] : 0;
    const size_t take = std::min(at, v.iov_len);
    if (take > 0) {
      s.head.push_back({v.iov_base, take});
      if (with_offsets) s.head_offsets.push_back(off);
    }
    if (take < v.iov_len) {
      s.tail.push_back(
          {static_cast<uint8_t*>(v.iov_base) + take, v.iov_len - take});
      if (with_offsets) s.tail_offsets.push_back(off + take);
    }
    at -= take;
  }
  return s;
}

absl::Status Injected(FaultOp op, uint64_t nth, absl::string_view what) {
  return absl::InternalError(absl::StrFormat("injected fault: %s at %s call %d",
                                             what, FaultOpName(op), nth));
}

class FaultyTransport final : public channels::Transport {
 public:
  FaultyTransport(std::unique_ptr<channels::Transport> inner,
                  const engine::TransportSite& site, FaultInjector* injector)
      : inner_(std::move(inner)), site_(site), injector_(injector) {}

  TransportKind kind() const override { return inner_->kind(); }
  uint32_t capabilities() const override { return inner_->capabilities(); }

  absl::StatusOr<absl::Span<uint8_t>> AcquireHeader() override {
    if (Hit(FaultOp::kAcquireHeader)) {
      RAMFERRY_RETURN_IF_ERROR(Apply(FaultOp::kAcquireHeader));
    }
    absl::StatusOr<absl::Span<uint8_t>> h = inner_->AcquireHeader();
    if (h.ok()) header_ = *h;
    return h;
  }

  absl::Status SendPacket(const channels::OutgoingPacket& packet) override {
    if (!Hit(FaultOp::kSendPacket)) return inner_->SendPacket(packet);
    switch (injector_->plan().kind) {
      case FaultKind::kShortThenFail:
        return SendShortThenFail(packet);
      case FaultKind::kShortContinue:
        return SendInTwoPieces(packet);
      default:
        RAMFERRY_RETURN_IF_ERROR(Apply(FaultOp::kSendPacket));
        return inner_->SendPacket(packet);
    }
  }

  absl::Status Flush() override {
    if (Hit(FaultOp::kFlush)) {
      RAMFERRY_RETURN_IF_ERROR(Apply(FaultOp::kFlush));
    }
    return inner_->Flush();
  }

  absl::Status Submit() override {
    if (Hit(FaultOp::kSubmit)) {
      RAMFERRY_RETURN_IF_ERROR(Apply(FaultOp::kSubmit));
    }
    return inner_->Submit();
  }

  absl::Status Poll() override {
    if (Hit(FaultOp::kPoll)) {
      RAMFERRY_RETURN_IF_ERROR(Apply(FaultOp::kPoll));
    }
    return inner_->Poll();
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
    if (!Hit(FaultOp::kReadExact)) {
      return inner_->ReadExact(buf, at_packet_boundary);
    }
    if (injector_->plan().kind == FaultKind::kShortThenFail) {
      const size_t half = buf.size() / 2;
      RAMFERRY_RETURN_IF_ERROR(
          inner_->ReadExact(buf.subspan(0, half), at_packet_boundary));
      return Injected(FaultOp::kReadExact, injector_->nth(),
                      absl::StrFormat("short read (%d of %d bytes), then error",
                                      half, buf.size()));
    }
    RAMFERRY_RETURN_IF_ERROR(Apply(FaultOp::kReadExact));
    return inner_->ReadExact(buf, at_packet_boundary);
  }

  absl::Status ReadPayload(absl::Span<const iovec> dst) override {
    if (!Hit(FaultOp::kReadPayload)) return inner_->ReadPayload(dst);
    if (injector_->plan().kind == FaultKind::kShortThenFail) {
      const size_t total = channels::IovBytes(dst);
      IovSplit split = SplitIov(dst, {}, total / 2);
      RAMFERRY_RETURN_IF_ERROR(inner_->ReadPayload(split.head));
      return Injected(FaultOp::kReadPayload, injector_->nth(),
                      absl::StrFormat("short read (%d of %d bytes), then error",
                                      total / 2, total));
    }
    RAMFERRY_RETURN_IF_ERROR(Apply(FaultOp::kReadPayload));
    return inner_->ReadPayload(dst);
  }

  void Shutdown() override {
    injector_->CountShutdown(site_.source);
    inner_->Shutdown();
  }

 private:
  bool Hit(FaultOp op) {
    return injector_->Count(site_.source, op, site_.channel);
  }

  // The faults that act before the real call: an error ends the call;
  // otherwise the caller goes on with it.
  absl::Status Apply(FaultOp op) {
    const FaultPlan& plan = injector_->plan();
    switch (plan.kind) {
      case FaultKind::kError:
      case FaultKind::kShortThenFail:  // where an op has no short form
      case FaultKind::kShortContinue:
        return Injected(op, plan.nth, "error");
      case FaultKind::kDelay:
        absl::SleepFor(plan.delay);
        return absl::OkStatus();
      case FaultKind::kShutdown:
        if (site_.fd >= 0) {
          ::shutdown(site_.fd, SHUT_RDWR);
        } else {
          inner_->Shutdown();
        }
        return absl::OkStatus();
      case FaultKind::kReset:
        if (site_.fd >= 0) {
          // Disconnecting an established TCP socket sends a RST and fails
          // later calls on it with ECONNRESET/EPIPE.
          linger l{1, 0};
          setsockopt(site_.fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
          sockaddr unspec{};
          unspec.sa_family = AF_UNSPEC;
          connect(site_.fd, &unspec, sizeof unspec);
        } else {
          inner_->Shutdown();
        }
        return absl::OkStatus();
    }
    return absl::InternalError("unknown fault kind");
  }

  // Bytes of the packet: header then payload, as a stream transport sends
  // them.
  static size_t PacketBytes(const channels::OutgoingPacket& p) {
    return p.header_bytes + channels::IovBytes(p.payload);
  }

  absl::Status SendShortThenFail(const channels::OutgoingPacket& packet) {
    const size_t total = PacketBytes(packet);
    const size_t half = total / 2;
    channels::OutgoingPacket first = packet;
    IovSplit split;
    if (half <= packet.header_bytes) {
      first.header_bytes = half;
      first.payload = {};
      first.payload_offsets = {};
    } else {
      split = SplitIov(packet.payload, packet.payload_offsets,
                       half - packet.header_bytes);
      first.payload = split.head;
      first.payload_offsets = split.head_offsets;
    }
    RAMFERRY_RETURN_IF_ERROR(inner_->SendPacket(first));
    // Batching transports queue until Submit: push the part out.
    RAMFERRY_RETURN_IF_ERROR(inner_->Submit());
    return Injected(FaultOp::kSendPacket, injector_->nth(),
                    absl::StrFormat("short write (%d of %d bytes), then error",
                                    half, total));
  }

  // The packet's byte stream in two sends: the header (or its first half,
  // for a header-only packet) with the first half of the payload, then
  // the rest behind a second header buffer holding the header's remainder.
  absl::Status SendInTwoPieces(const channels::OutgoingPacket& packet) {
    const size_t total = PacketBytes(packet);
    const size_t at = total / 2;
    const size_t head_header = std::min(at, packet.header_bytes);
    std::vector<uint8_t> header_rest(header_.begin() + head_header,
                                     header_.begin() + packet.header_bytes);
    IovSplit split =
        SplitIov(packet.payload, packet.payload_offsets,
                 at > packet.header_bytes ? at - packet.header_bytes : 0);
    channels::OutgoingPacket first{head_header, packet.region_id, split.head,
                                   split.head_offsets};
    RAMFERRY_RETURN_IF_ERROR(inner_->SendPacket(first));
    RAMFERRY_ASSIGN_OR_RETURN(absl::Span<uint8_t> h, inner_->AcquireHeader());
    if (!header_rest.empty()) {  // memcpy's pointers must be valid even for 0
      std::memcpy(h.data(), header_rest.data(), header_rest.size());
    }
    channels::OutgoingPacket second{header_rest.size(), packet.region_id,
                                    split.tail, split.tail_offsets};
    return inner_->SendPacket(second);
  }

  const std::unique_ptr<channels::Transport> inner_;
  const engine::TransportSite site_;
  FaultInjector* const injector_;
  absl::Span<uint8_t> header_;  // the last AcquireHeader()'s buffer
};

FaultInjector* installed = nullptr;  // test thread only

}  // namespace

absl::string_view FaultOpName(FaultOp op) {
  switch (op) {
    case FaultOp::kAcquireHeader:
      return "AcquireHeader";
    case FaultOp::kSendPacket:
      return "SendPacket";
    case FaultOp::kSubmit:
      return "Submit";
    case FaultOp::kFlush:
      return "Flush";
    case FaultOp::kPoll:
      return "Poll";
    case FaultOp::kReadExact:
      return "ReadExact";
    case FaultOp::kReadPayload:
      return "ReadPayload";
  }
  return "?";
}

absl::string_view FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kError:
      return "error";
    case FaultKind::kShortThenFail:
      return "short_then_fail";
    case FaultKind::kShortContinue:
      return "short_continue";
    case FaultKind::kDelay:
      return "delay";
    case FaultKind::kShutdown:
      return "shutdown";
    case FaultKind::kReset:
      return "reset";
  }
  return "?";
}

bool IsBenign(FaultKind kind) {
  return kind == FaultKind::kShortContinue || kind == FaultKind::kDelay;
}

std::string FaultPlanName(const FaultPlan& plan) {
  return absl::StrFormat("%s_%s_%d_%s", plan.source ? "src" : "dst",
                         FaultOpName(plan.op), plan.nth,
                         FaultKindName(plan.kind));
}

FaultInjector::FaultInjector(const FaultPlan& plan)
    : plan_(plan), nth_(plan.nth) {
  // One at a time: a second would silently replace the first.
  if (installed != nullptr) std::abort();
  installed = this;
  engine::SetTransportDecoratorForTesting(
      [this](std::unique_ptr<channels::Transport> inner,
             const engine::TransportSite& site) {
        return Wrap(std::move(inner), site);
      });
}

FaultInjector::~FaultInjector() {
  engine::SetTransportDecoratorForTesting(nullptr);
  installed = nullptr;
}

absl::Time FaultInjector::fired_at() const {
  return absl::FromUnixNanos(fired_at_ns_.load());
}

uint64_t FaultInjector::calls(bool source, FaultOp op) const {
  return calls_[source ? 1 : 0][static_cast<int>(op)].load();
}

bool FaultInjector::Count(bool source, FaultOp op, uint32_t channel) {
  const uint64_t n = ++calls_[source ? 1 : 0][static_cast<int>(op)];
  const uint64_t nth = nth_.load();
  if (source != plan_.source || op != plan_.op || n < nth) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (n == nth) {
      if (std::find(faulted_.begin(), faulted_.end(), channel) ==
          faulted_.end()) {
        faulted_.push_back(channel);
      }
    } else if (faulted_.empty() || faulted_.size() >= plan_.channels ||
               std::find(faulted_.begin(), faulted_.end(), channel) !=
                   faulted_.end()) {
      return false;
    } else {
      faulted_.push_back(channel);
    }
  }
  if (fired()) return true;
  fired_channel_.store(channel);
  fired_at_ns_.store(absl::ToUnixNanos(absl::Now()));
  fired_.store(true, std::memory_order_release);
  return true;
}

std::vector<uint32_t> FaultInjector::fired_channels() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faulted_;
}

std::unique_ptr<channels::Transport> FaultInjector::Wrap(
    std::unique_ptr<channels::Transport> inner,
    const engine::TransportSite& site) {
  return std::make_unique<FaultyTransport>(std::move(inner), site, this);
}

}  // namespace ramferry::testing
