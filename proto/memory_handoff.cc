#include "proto/memory_handoff.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "proto/wire.h"

namespace ramferry::proto {
namespace {

bool KnownKind(uint16_t kind) {
  return kind == static_cast<uint16_t>(OfferKind::kExport) ||
         kind == static_cast<uint16_t>(OfferKind::kHandOver);
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
  constexpr uint64_t kPage = kHandoffPageSize;
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
  if (absl::Status s = CheckRegions(offer.regions); !s.ok()) return s;
  if ((offer.flags & ~kOfferPausesItself) != 0 ||
      !KnownKind(static_cast<uint16_t>(offer.kind))) {
    return absl::InvalidArgumentError("memory offer: unknown kind or flags");
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
    w.U32(kHandoffPageSize);
    w.U64(r.base);
    w.U64(r.length);
    w.U64(r.fd_offset);
    w.Str16(r.name);
  }
  return out;
}

absl::StatusOr<Offer> DecodeOffer(absl::Span<const uint8_t> message) {
  WireReader r(message);
  const uint32_t magic = r.U32();
  const uint16_t version = r.U16();
  const uint16_t kind = r.U16();
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
  if (!r.ok() || !KnownKind(kind) || (o.flags & ~kOfferPausesItself) != 0 ||
      count == 0 || count > kMaxHandoffRegions) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "memory offer: kind %d, flags 0x%x, %d regions: want kind 1 or 2, "
        "no unknown flag, 1 to %d regions",
        kind, o.flags, count, kMaxHandoffRegions));
  }
  o.kind = static_cast<OfferKind>(kind);
  for (uint32_t i = 0; i < count; ++i) {
    OfferedRegion region;
    region.id = r.U32();
    const uint32_t page_size = r.U32();
    region.base = r.U64();
    region.length = r.U64();
    region.fd_offset = r.U64();
    region.name = r.Str16();
    if (!r.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "memory offer of %d bytes ends inside region %d of %d",
          message.size(), i, count));
    }
    if (page_size != kHandoffPageSize) {
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
  if (absl::Status s = CheckRegions(o.regions); !s.ok()) return s;
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
  }
  return "UNKNOWN";
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
  if (!r.ok() || r.remaining() != 0 || magic != kHandoffMagic || zero != 0 ||
      type < static_cast<uint16_t>(HandoffCommand::kPause) ||
      type > static_cast<uint16_t>(HandoffCommand::kAdopted)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bad memory hand-off command (%d bytes, type %d)",
                        message.size(), type));
  }
  c.type = static_cast<HandoffCommand>(type);
  return c;
}

}  // namespace ramferry::proto
