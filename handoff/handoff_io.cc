#include "handoff/handoff_io.h"

#include <sys/socket.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "handoff/unix_seqpacket.h"

namespace ramferry::handoff {

absl::StatusOr<std::vector<uint8_t>> EncodeOfferOf(
    proto::OfferKind kind, uint32_t flags,
    absl::Span<const SharedRegion> regions,
    absl::Span<const uint64_t> digests) {
  if (!digests.empty() && digests.size() != regions.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d digests for %d regions", digests.size(), regions.size()));
  }
  proto::Offer offer;
  offer.kind = kind;
  offer.flags = flags | (digests.empty() ? 0 : proto::kOfferRegionDigests);
  offer.pid = static_cast<uint32_t>(getpid());
  for (size_t i = 0; i < regions.size(); ++i) {
    const SharedRegion& r = regions[i];
    offer.regions.push_back({r.id, reinterpret_cast<uint64_t>(r.base), r.length,
                             r.fd_offset, r.name,
                             digests.empty() ? 0 : digests[i]});
  }
  return proto::EncodeOffer(offer);
}

absl::StatusOr<ReceivedOffer> ReceiveOffer(int fd, proto::OfferKind want,
                                           absl::Duration timeout) {
  RAMFERRY_ASSIGN_OR_RETURN(
      Packet p,
      ReceivePacket(fd, proto::kMaxOfferBytes,
                    proto::kExportFixedFds + proto::kMaxHandoffRegions,
                    timeout));
  absl::StatusOr<proto::Offer> offer = proto::DecodeOffer(p.bytes);
  if (!offer.ok()) return offer.status();
  if (offer->kind != want) {
    return absl::InvalidArgumentError(
        want == proto::OfferKind::kExport
            ? "it hands over received memory; attach to a workload's export "
              "instead"
            : "it offers a workload's export; adopt memory a destination "
              "hands over instead");
  }
  if (p.fds.size() != offer->fd_count()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "memory offer for %d regions came with %d descriptors, not %d",
        offer->regions.size(), p.fds.size(), offer->fd_count()));
  }
  return ReceivedOffer{*std::move(offer), std::move(p.fds)};
}

absl::Status SendCommand(int fd, proto::HandoffCommand type, uint64_t value) {
  return SendPacket(fd, proto::EncodeCommand({type, value}));
}

absl::StatusOr<proto::CommandMessage> ReceiveCommand(int fd,
                                                     absl::Duration timeout) {
  RAMFERRY_ASSIGN_OR_RETURN(
      Packet p, ReceivePacket(fd, proto::kCommandBytes, 0, timeout));
  if (p.bytes.empty()) {
    return absl::UnavailableError("the peer closed the hand-off connection");
  }
  return proto::DecodeCommand(p.bytes);
}

absl::StatusOr<ReceivedCommand> ReceiveCommandWithFds(int fd,
                                                      absl::Duration timeout) {
  RAMFERRY_ASSIGN_OR_RETURN(Packet p,
                            ReceivePacket(fd, proto::kCommandBytes,
                                          proto::kMaxHandoffRegions, timeout));
  if (p.bytes.empty()) {
    return absl::UnavailableError("the peer closed the hand-off connection");
  }
  RAMFERRY_ASSIGN_OR_RETURN(proto::CommandMessage c,
                            proto::DecodeCommand(p.bytes));
  const size_t want = c.type == proto::HandoffCommand::kHandOverGrant
                          ? static_cast<size_t>(c.value)
                          : 0;
  if (p.fds.size() != want) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s came with %d descriptors, not %d",
                        proto::HandoffCommandName(c.type), p.fds.size(), want));
  }
  return ReceivedCommand{c, std::move(p.fds)};
}

absl::Status OfferToAdopter(int conn, const std::string& path,
                            absl::Span<const SharedRegion> regions,
                            absl::Span<const uint64_t> digests,
                            absl::Duration timeout) {
  RAMFERRY_ASSIGN_OR_RETURN(
      std::vector<uint8_t> encoded,
      EncodeOfferOf(proto::OfferKind::kHandOver, 0, regions, digests));
  std::vector<int> fds;
  for (const SharedRegion& r : regions) fds.push_back(r.fd);
  if (absl::Status s = SendPacket(conn, encoded, fds); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("offering the memory to ", path,
                                               ": ", s.message()));
  }
  absl::StatusOr<proto::CommandMessage> c = ReceiveCommand(conn, timeout);
  if (absl::IsDeadlineExceeded(c.status())) {
    // Shut before the last look: from here the adopter's ADOPTED fails
    // (EPIPE) and it does not run on the memory, unless it was already
    // queued here, which the look finds. No outcome stays unknown.
    shutdown(conn, SHUT_RDWR);
    absl::StatusOr<proto::CommandMessage> last =
        ReceiveCommand(conn, absl::ZeroDuration());
    if (last.ok() && last->type == proto::HandoffCommand::kAdopted) {
      return absl::OkStatus();
    }
    return absl::DeadlineExceededError(absl::StrFormat(
        "the process at %s did not acknowledge the memory within %s (now it "
        "cannot: the connection is shut); is it stuck, or checking a very "
        "large memory? Raise the timeout",
        path, absl::FormatDuration(timeout)));
  }
  if (absl::IsUnavailable(c.status())) {
    return absl::UnavailableError(absl::StrCat(
        "the process at ", path,
        " refused the memory (see its error): ", c.status().message()));
  }
  if (!c.ok()) return c.status();
  if (c->type == proto::HandoffCommand::kRefused) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the process at ", path, " refused the memory: ",
        proto::RefusalReasonText(static_cast<proto::RefusalReason>(c->value))));
  }
  if (c->type != proto::HandoffCommand::kAdopted) {
    return absl::InternalError(absl::StrCat("the adopting process answered ",
                                            proto::HandoffCommandName(c->type),
                                            ", not ADOPTED"));
  }
  return absl::OkStatus();
}

}  // namespace ramferry::handoff
