#include "proto/memory_handoff.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/page_size.h"
#include "base/status_macros.h"
#include "proto/wire.h"

namespace ramferry::proto {
namespace {

bool KnownKind(uint16_t kind) {
  return kind == static_cast<uint16_t>(OfferKind::kExport) ||
         kind == static_cast<uint16_t>(OfferKind::kHandOver);
}

// The flags `kind` may carry: consent is the exporter's to give, digests
// the giver's of a hand-over.
uint32_t FlagsOf(uint16_t kind) {
  return kind == static_cast<uint16_t>(OfferKind::kExport)
             ? kOfferPausesItself | kOfferAllowsHandOver
             : kOfferPausesItself | kOfferRegionDigests;
}

// The rules an offer obeys, for both directions: a region the attacher
// maps must make sense as a mapping, and pagemap reports must map back to
// exactly one region.
absl::Status CheckRegions(const std::vector<OfferedRegion>& regions) {
  if (regions.empty() || regions.size() > kMaxHandoffRegions) {
    return absl::InvalidArgumentError(
        absl::StrFormat("memory offer with %d regions: want 1 to %d",
                        regions.size(), kMaxHandoffRegions));
  }
  constexpr uint64_t kPage = base::kSmallPageSize;
  for (const OfferedRegion& r : regions) {
    if (r.length == 0 || r.length % kPage != 0 || r.base % kPage != 0 ||
        r.fd_offset % kPage != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "memory offer: region %d (base 0x%x, %d bytes at file offset %d) "
          "is not whole 4 KiB pages at page-aligned addresses and offsets",
          r.id, r.base, r.length, r.fd_offset));
    }
    if (r.base + r.length < r.base || r.fd_offset + r.length < r.fd_offset) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "memory offer: region %d (base 0x%x, %d bytes at file offset %d) "
          "wraps past the end of %s",
          r.id, r.base, r.length, r.fd_offset,
          r.base + r.length < r.base ? "the address space"
                                     : "a file's offsets"));
    }
    if (r.name.size() > kMaxHandoffName) {
      return absl::InvalidArgumentError(
          absl::StrFormat("memory offer: region %d's name is %d bytes, over %d",
                          r.id, r.name.size(), kMaxHandoffName));
    }
  }
  std::vector<const OfferedRegion*> sorted;
  sorted.reserve(regions.size());
  for (const OfferedRegion& r : regions) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(),
            [](const OfferedRegion* a, const OfferedRegion* b) {
              return a->base < b->base;
            });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i - 1]->base + sorted[i - 1]->length > sorted[i]->base) {
      return absl::InvalidArgumentError(
          absl::StrFormat("memory offer: regions %d and %d overlap",
                          sorted[i - 1]->id, sorted[i]->id));
    }
  }
  for (size_t i = 0; i < regions.size(); ++i) {
    for (size_t j = i + 1; j < regions.size(); ++j) {
      if (regions[i].id == regions[j].id) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "memory offer: region id %d appears twice", regions[i].id));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> EncodeOffer(const Offer& offer) {
  RAMFERRY_RETURN_IF_ERROR(CheckRegions(offer.regions));
  const uint16_t kind = static_cast<uint16_t>(offer.kind);
  if (!KnownKind(kind) || (offer.flags & ~FlagsOf(kind)) != 0) {
    return absl::InvalidArgumentError("memory offer: unknown kind or flags");
  }
  const bool digests = (offer.flags & kOfferRegionDigests) != 0;
  for (const OfferedRegion& r : offer.regions) {
    if (!digests && r.digest != 0) {
      return absl::InvalidArgumentError(
          "memory offer: a region digest without kOfferRegionDigests");
    }
  }
  std::vector<uint8_t> out;
  WireWriter w(&out);
  w.U32(kHandoffMagic);
  w.U16(kHandoffVersion);
  w.U16(static_cast<uint16_t>(offer.kind));
  w.U32(offer.flags);
  w.U32(offer.pid);
  w.U32(static_cast<uint32_t>(offer.regions.size()));
  for (const OfferedRegion& r : offer.regions) {
    w.U32(r.id);
    w.U32(static_cast<uint32_t>(base::kSmallPageSize));
    w.U64(r.base);
    w.U64(r.length);
    w.U64(r.fd_offset);
    w.Str16(r.name);
    if (digests) w.U64(r.digest);
  }
  return out;
}

absl::StatusOr<Offer> DecodeOffer(absl::Span<const uint8_t> message) {
  WireReader r(message);
  const uint32_t magic = r.U32();
  const uint16_t version = r.U16();
  const uint16_t kind = r.U16();
  // A message too short for its preamble is cut, not foreign: say which.
  if (message.size() >= sizeof magic && magic == kHandoffMagic && !r.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "memory offer cut short: %d bytes, too few for its version and kind",
        message.size()));
  }
  if (!r.ok() || magic != kHandoffMagic) {
    return absl::InvalidArgumentError(
        "not a ramferry memory offer (wrong magic): is the socket a "
        "ramferry export or adopter?");
  }
  if (version != kHandoffVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "memory offer of protocol version %d; this library speaks %d: use "
        "the same ramferry release on both sides",
        version, kHandoffVersion));
  }
  Offer o;
  o.flags = r.U32();
  o.pid = r.U32();
  const uint32_t count = r.U32();
  if (!r.ok() || !KnownKind(kind) || (o.flags & ~FlagsOf(kind)) != 0 ||
      count == 0 || count > kMaxHandoffRegions) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "memory offer: kind %d, flags 0x%x, %d regions: want kind 1 or 2, "
        "no flag unknown to this release for that kind, 1 to %d regions "
        "(is the peer a newer ramferry release?)",
        kind, o.flags, count, kMaxHandoffRegions));
  }
  const bool digests = (o.flags & kOfferRegionDigests) != 0;
  o.kind = static_cast<OfferKind>(kind);
  for (uint32_t i = 0; i < count; ++i) {
    OfferedRegion region;
    region.id = r.U32();
    const uint32_t page_size = r.U32();
    region.base = r.U64();
    region.length = r.U64();
    region.fd_offset = r.U64();
    region.name = r.Str16();
    if (digests) region.digest = r.U64();
    if (!r.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "memory offer of %d bytes ends inside region %d of %d",
          message.size(), i, count));
    }
    if (page_size != base::kSmallPageSize) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "memory offer: region %d has %d-byte pages; only 4 KiB pages are "
          "handed over",
          region.id, page_size));
    }
    o.regions.push_back(std::move(region));
  }
  if (r.remaining() != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "memory offer has %d bytes after its last region", r.remaining()));
  }
  RAMFERRY_RETURN_IF_ERROR(CheckRegions(o.regions));
  return o;
}

const char* HandoffCommandName(HandoffCommand command) {
  switch (command) {
    case HandoffCommand::kPause:
      return "PAUSE";
    case HandoffCommand::kPaused:
      return "PAUSED";
    case HandoffCommand::kResume:
      return "RESUME";
    case HandoffCommand::kResumed:
      return "RESUMED";
    case HandoffCommand::kMigrated:
      return "MIGRATED";
    case HandoffCommand::kAdopted:
      return "ADOPTED";
    case HandoffCommand::kHandOverRequest:
      return "HAND_OVER_REQUEST";
    case HandoffCommand::kHandOverGrant:
      return "HAND_OVER_GRANT";
    case HandoffCommand::kRefused:
      return "REFUSED";
  }
  return "UNKNOWN";
}

const char* RefusalReasonText(RefusalReason reason) {
  switch (reason) {
    case RefusalReason::kNotAllowed:
      return "the workload did not allow hand-over (it exports without "
             "ramferry_export_listen_with(RAMFERRY_EXPORT_ALLOW_HAND_OVER) "
             "/ ExportOptions::allow_hand_over)";
    case RefusalReason::kNotPaused:
      return "the workload was not paused when asked for its memory";
    case RefusalReason::kCannotReopen:
      return "the workload could not reopen its memory read-write (see its "
             "error output)";
    case RefusalReason::kDigestMismatch:
      return "the adopter's digest of a region differs from the one taken at "
             "the pause: the memory changed after the pause (another writer "
             "of the memfd?) or is not what was offered";
  }
  return "unknown reason";
}

std::vector<uint8_t> EncodeCommand(const CommandMessage& command) {
  std::vector<uint8_t> out;
  WireWriter w(&out);
  w.U32(kHandoffMagic);
  w.U16(static_cast<uint16_t>(command.type));
  w.U16(0);
  w.U64(command.value);
  return out;
}

absl::StatusOr<CommandMessage> DecodeCommand(
    absl::Span<const uint8_t> message) {
  WireReader r(message);
  const uint32_t magic = r.U32();
  const uint16_t type = r.U16();
  const uint16_t zero = r.U16();
  CommandMessage c;
  c.value = r.U64();
  const bool reason_ok =
      type != static_cast<uint16_t>(HandoffCommand::kRefused) ||
      (c.value >= static_cast<uint64_t>(RefusalReason::kNotAllowed) &&
       c.value <= static_cast<uint64_t>(RefusalReason::kDigestMismatch));
  // A grant's descriptor count is one per region: never more than an
  // offer may hold.
  const bool count_ok =
      type != static_cast<uint16_t>(HandoffCommand::kHandOverGrant) ||
      (c.value >= 1 && c.value <= kMaxHandoffRegions);
  if (!r.ok() || r.remaining() != 0 || magic != kHandoffMagic || zero != 0 ||
      type < static_cast<uint16_t>(HandoffCommand::kPause) ||
      type > static_cast<uint16_t>(HandoffCommand::kRefused) || !reason_ok ||
      !count_ok) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bad memory hand-off command (%d bytes, type %d)",
                        message.size(), type));
  }
  c.type = static_cast<HandoffCommand>(type);
  return c;
}

}  // namespace ramferry::proto
