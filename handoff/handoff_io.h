// What one memory hand-off connection carries (proto/memory_handoff.h),
// over handoff/unix_seqpacket.h: the offer with its descriptors, then
// commands. Shared by the export, the attacher, the hand-over and the
// adopter, so each side checks what it receives the same way.
#ifndef RAMFERRY_HANDOFF_HANDOFF_IO_H_
#define RAMFERRY_HANDOFF_HANDOFF_IO_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/owned_fd.h"
#include "proto/memory_handoff.h"
#include "ramferry/memory_handoff.h"

namespace ramferry::handoff {

// The offer of `regions` (this process's addresses and files).
absl::StatusOr<std::vector<uint8_t>> EncodeOfferOf(
    proto::OfferKind kind, uint32_t flags,
    absl::Span<const SharedRegion> regions);

struct ReceivedOffer {
  proto::Offer offer;
  std::vector<base::OwnedFd> fds;  // exactly offer.fd_count(), in offer order
};
// The next packet as an offer of kind `want` that came with exactly its
// descriptors; anything else is refused, with what came closed.
absl::StatusOr<ReceivedOffer> ReceiveOffer(int fd, proto::OfferKind want,
                                           absl::Duration timeout);

absl::Status SendCommand(int fd, proto::HandoffCommand type,
                         uint64_t value = 0);
// The next command; UNAVAILABLE once the peer closed the connection.
absl::StatusOr<proto::CommandMessage> ReceiveCommand(int fd,
                                                     absl::Duration timeout);

}  // namespace ramferry::handoff

#endif  // RAMFERRY_HANDOFF_HANDOFF_IO_H_
