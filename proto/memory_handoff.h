// The memory hand-off protocol (encode, decode, validation; no I/O): the
// messages between a workload that exports its memory and the migration
// process that attaches to it, and between a destination and the process
// that adopts what it received (include/ramferry/memory_handoff.h).
//
// One unix SOCK_SEQPACKET connection, one message per packet, big-endian
// like every format in proto/. The first message is an OFFER, from the
// side that gives memory; its file descriptors travel with it
// (SCM_RIGHTS), in this order: for an export, the exporter's pagemap, then
// one per region, opened read-only (the attacher reads; its write
// tracking stays with the exporter, whose userfaultfd never travels: a
// holder of it could register and fill any range of the exporter's
// memory); for a hand-over, one per region, read-write.
//
// OFFER:
//    0 u32 magic          kHandoffMagic
//    4 u16 version        kHandoffVersion; a peer refuses another
//    6 u16 kind           kOfferExport | kOfferHandOver
//    8 u32 flags          kOfferPausesItself, kOfferAllowsHandOver (export
//                         only), kOfferRegionDigests (hand-over only);
//                         other bits zero
//   12 u32 pid            the offering process, as its own pid namespace
//                         numbers it (informative: the receiver trusts
//                         SO_PEERCRED)
//   16 u32 region_count   1 to kMaxHandoffRegions
//   20 region_count x {
//        u32 id, u32 page_size (4096), u64 base (the offerer's address,
//        page aligned), u64 length (>= one page, a page multiple),
//        u64 fd_offset (page aligned), u16 name length, name bytes,
//        with kOfferRegionDigests: u64 XXH3-64 of the region's bytes
//      }
// Region ids are distinct and the offerer's address ranges do not
// overlap (the attacher maps the pagemap's reports back through them).
//
// COMMAND (every later message): u32 magic, u16 type, u16 zero, u64 value
//   PAUSE    attacher -> exporter; value: 0
//   PAUSED   exporter -> attacher; value: CLOCK_MONOTONIC ns of the pause
//   RESUME   attacher -> exporter
//   RESUMED  exporter -> attacher
//   MIGRATED attacher -> exporter: the last message
//   ADOPTED  adopter -> destination: the regions are mapped
//   HAND_OVER_REQUEST attacher -> exporter, only to an offer that had
//            kOfferAllowsHandOver and only while paused: send the
//            regions' descriptors read-write, for an adopter
//   HAND_OVER_GRANT   exporter -> attacher; value: how many descriptors
//            come with it (SCM_RIGHTS, read-write), one per region in
//            offer order, and nothing else does
//   REFUSED  exporter -> attacher (to HAND_OVER_REQUEST) or adopter ->
//            destination (to an offer); value: a RefusalReason
//
// Compatibility: the additions since version 2's first release (the
// flags kOfferAllowsHandOver and kOfferRegionDigests, the commands from
// HAND_OVER_REQUEST on) appear only where a party asked for them (a
// workload that allows hand-over, a hand-over with digests), so peers
// that use neither exchange exactly what they did. A party of the first
// release refuses an offer with a flag it does not know (a clear error,
// nothing mapped), and an attacher sends HAND_OVER_REQUEST only to an
// export whose offer said it understands it: an older workload is never
// paused for a request it would take for a broken connection.
#ifndef RAMFERRY_PROTO_MEMORY_HANDOFF_H_
#define RAMFERRY_PROTO_MEMORY_HANDOFF_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/page_size.h"

namespace ramferry::proto {

inline constexpr uint32_t kHandoffMagic = 0x52464d48;  // "RFMH"
// 2: an export's offer no longer carries its userfaultfd.
inline constexpr uint16_t kHandoffVersion = 2;
inline constexpr uint32_t kMaxHandoffRegions = 64;
inline constexpr size_t kMaxHandoffName = 64;
// The descriptors an export's offer carries before its regions'.
inline constexpr size_t kExportFixedFds = 1;
// The largest OFFER: a receive buffer of this size never truncates one.
inline constexpr size_t kMaxOfferBytes =
    20 + kMaxHandoffRegions * (34 + kMaxHandoffName + 8);
inline constexpr size_t kCommandBytes = 16;

enum class OfferKind : uint16_t { kExport = 1, kHandOver = 2 };
inline constexpr uint32_t kOfferPausesItself = 1u << 0;
// The exporter consented to hand its memory over read-write (export only).
inline constexpr uint32_t kOfferAllowsHandOver = 1u << 1;
// Each region carries the XXH3-64 digest the giver took of it, which the
// adopter checks before it acknowledges (hand-over only).
inline constexpr uint32_t kOfferRegionDigests = 1u << 2;

struct OfferedRegion {
  uint32_t id = 0;
  uint64_t base = 0;
  uint64_t length = 0;
  uint64_t fd_offset = 0;
  std::string name;
  uint64_t digest = 0;  // with kOfferRegionDigests only; else 0
  bool operator==(const OfferedRegion&) const = default;
};

struct Offer {
  OfferKind kind = OfferKind::kExport;
  uint32_t flags = 0;
  uint32_t pid = 0;
  std::vector<OfferedRegion> regions;
  // How many descriptors must come with it.
  size_t fd_count() const {
    return regions.size() + (kind == OfferKind::kExport ? kExportFixedFds : 0);
  }
  bool operator==(const Offer&) const = default;
};

// Fails (rather than encoding something Decode refuses) on a bad offer.
absl::StatusOr<std::vector<uint8_t>> EncodeOffer(const Offer& offer);
absl::StatusOr<Offer> DecodeOffer(absl::Span<const uint8_t> message);

enum class HandoffCommand : uint16_t {
  kPause = 1,
  kPaused = 2,
  kResume = 3,
  kResumed = 4,
  kMigrated = 5,
  kAdopted = 6,
  kHandOverRequest = 7,
  kHandOverGrant = 8,
  kRefused = 9,
};
// Why a REFUSED came; a peer refuses any other value.
enum class RefusalReason : uint64_t {
  // The exporter did not allow hand-over (no kOfferAllowsHandOver).
  kNotAllowed = 1,
  // HAND_OVER_REQUEST while the exporter was not paused.
  kNotPaused = 2,
  // The exporter could not reopen its memory read-write.
  kCannotReopen = 3,
  // The adopter's digest of a region differs from the offer's.
  kDigestMismatch = 4,
};
const char* RefusalReasonText(RefusalReason reason);
const char* HandoffCommandName(HandoffCommand command);

struct CommandMessage {
  HandoffCommand type = HandoffCommand::kPause;
  uint64_t value = 0;
  bool operator==(const CommandMessage&) const = default;
};
std::vector<uint8_t> EncodeCommand(const CommandMessage& command);
absl::StatusOr<CommandMessage> DecodeCommand(absl::Span<const uint8_t> message);

}  // namespace ramferry::proto

#endif  // RAMFERRY_PROTO_MEMORY_HANDOFF_H_
