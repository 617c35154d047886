#include "handoff/handoff_io.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "handoff/unix_seqpacket.h"

namespace ramferry::handoff {

absl::StatusOr<std::vector<uint8_t>> EncodeOfferOf(
    proto::OfferKind kind, uint32_t flags,
    absl::Span<const SharedRegion> regions) {
  proto::Offer offer;
  offer.kind = kind;
  offer.flags = flags;
  offer.pid = static_cast<uint32_t>(getpid());
  for (const SharedRegion& r : regions) {
    offer.regions.push_back({r.id, reinterpret_cast<uint64_t>(r.base), r.length,
                             r.fd_offset, r.name});
  }
  return proto::EncodeOffer(offer);
}

absl::StatusOr<ReceivedOffer> ReceiveOffer(int fd, proto::OfferKind want,
                                           absl::Duration timeout) {
  absl::StatusOr<Packet> p = ReceivePacket(
      fd, proto::kMaxOfferBytes,
      proto::kExportFixedFds + proto::kMaxHandoffRegions, timeout);
  if (!p.ok()) return p.status();
  absl::StatusOr<proto::Offer> offer = proto::DecodeOffer(p->bytes);
  if (!offer.ok()) return offer.status();
  if (offer->kind != want) {
    return absl::InvalidArgumentError(
        want == proto::OfferKind::kExport
            ? "it hands over received memory; attach to a workload's export "
              "instead"
            : "it offers a workload's export; adopt memory a destination "
              "hands over instead");
  }
  if (p->fds.size() != offer->fd_count()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "memory offer for %d regions came with %d descriptors, not %d",
        offer->regions.size(), p->fds.size(), offer->fd_count()));
  }
  return ReceivedOffer{*std::move(offer), std::move(p->fds)};
}

absl::Status SendCommand(int fd, proto::HandoffCommand type, uint64_t value) {
  return SendPacket(fd, proto::EncodeCommand({type, value}));
}

absl::StatusOr<proto::CommandMessage> ReceiveCommand(int fd,
                                                     absl::Duration timeout) {
  absl::StatusOr<Packet> p =
      ReceivePacket(fd, proto::kCommandBytes, 0, timeout);
  if (!p.ok()) return p.status();
  if (p->bytes.empty()) {
    return absl::UnavailableError("the peer closed the hand-off connection");
  }
  return proto::DecodeCommand(p->bytes);
}

}  // namespace ramferry::handoff
