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
//    8 u32 flags          kOfferPausesItself; other bits zero
//   12 u32 pid            the offering process, as its own pid namespace
//                         numbers it (informative: the receiver trusts
//                         SO_PEERCRED)
//   16 u32 region_count   1 to kMaxHandoffRegions
//   20 region_count x {
//        u32 id, u32 page_size (4096), u64 base (the offerer's address,
//        page aligned), u64 length (>= one page, a page multiple),
//        u64 fd_offset (page aligned), u16 name length, name bytes
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
#ifndef RAMFERRY_PROTO_MEMORY_HANDOFF_H_
#define RAMFERRY_PROTO_MEMORY_HANDOFF_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ramferry::proto {

inline constexpr uint32_t kHandoffMagic = 0x52464d48;  // "RFMH"
// 2: an export's offer no longer carries its userfaultfd.
inline constexpr uint16_t kHandoffVersion = 2;
inline constexpr uint32_t kMaxHandoffRegions = 64;
inline constexpr size_t kMaxHandoffName = 64;
inline constexpr uint32_t kHandoffPageSize = 4096;
// The descriptors an export's offer carries before its regions'.
inline constexpr size_t kExportFixedFds = 1;
// The largest OFFER: a receive buffer of this size never truncates one.
inline constexpr size_t kMaxOfferBytes =
    20 + kMaxHandoffRegions * (34 + kMaxHandoffName);
inline constexpr size_t kCommandBytes = 16;

enum class OfferKind : uint16_t { kExport = 1, kHandOver = 2 };
inline constexpr uint32_t kOfferPausesItself = 1u << 0;

struct OfferedRegion {
  uint32_t id = 0;
  uint64_t base = 0;
  uint64_t length = 0;
  uint64_t fd_offset = 0;
  std::string name;
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
};
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
