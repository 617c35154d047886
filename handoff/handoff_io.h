// What one memory hand-off connection carries (proto/memory_handoff.h),
// over handoff/unix_seqpacket.h: the offer with its descriptors, then
// commands. Shared by the export, the attacher, the hand-over and the
// adopter, so each side checks what it receives the same way.
#ifndef RAMFERRY_HANDOFF_HANDOFF_IO_H_
#define RAMFERRY_HANDOFF_HANDOFF_IO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/owned_fd.h"
#include "proto/memory_handoff.h"
#include "ramferry/memory_handoff.h"

namespace ramferry::handoff {

// The offer of `regions` (this process's addresses and files); with
// `digests` (one per region), a hand-over that carries them.
absl::StatusOr<std::vector<uint8_t>> EncodeOfferOf(
    proto::OfferKind kind, uint32_t flags,
    absl::Span<const SharedRegion> regions,
    absl::Span<const uint64_t> digests = {});

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

// A command that may carry descriptors (HAND_OVER_GRANT): a grant must
// come with exactly as many as its value says, any other command with
// none; anything else is refused, with what came closed.
struct ReceivedCommand {
  proto::CommandMessage command;
  std::vector<base::OwnedFd> fds;
};
absl::StatusOr<ReceivedCommand> ReceiveCommandWithFds(int fd,
                                                      absl::Duration timeout);

// Offers `regions` (read-write files) to the adopter connected on `conn`
// (named `path` in errors), with `digests` if not empty, and waits up to
// `timeout` for its ADOPTED: the commit point. On a timeout the
// connection is shut before a last look for ADOPTED, so the adopter can
// no longer acknowledge unseen: OK means it holds the memory, an error
// that it does not and never will.
absl::Status OfferToAdopter(int conn, const std::string& path,
                            absl::Span<const SharedRegion> regions,
                            absl::Span<const uint64_t> digests,
                            absl::Duration timeout);

}  // namespace ramferry::handoff

#endif  // RAMFERRY_HANDOFF_HANDOFF_IO_H_
