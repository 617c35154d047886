// Fuzzes DecodeOffer and DecodeCommand: the first message on a memory
// hand-off socket (whose descriptors an attacher maps and scans through)
// and every later one, from a peer that may be anyone of this user.
//
// Input: a selector byte (bit 0: offer or command), then the message.
// Properties: an accepted offer holds 1 to kMaxHandoffRegions regions of
// whole 4 KiB pages at page-aligned, non-wrapping addresses and offsets,
// with distinct ids, names of at most kMaxHandoffName bytes and no two
// address ranges overlapping; a known kind and only that kind's flags
// (consent on an export, region digests on a hand-over); it
// re-encodes to the input byte for byte (one encoding per offer) and
// decodes again to the same offer. An accepted command is kCommandBytes
// long, of a known type (a grant counting 1 to kMaxHandoffRegions
// descriptors, a refusal a known reason), and re-encodes to the input.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "base/page_size.h"
#include "proto/memory_handoff.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzOffer(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::Offer> o = proto::DecodeOffer(in);
  if (!o.ok()) return;
  FUZZ_CHECK(o->kind == proto::OfferKind::kExport ||
             o->kind == proto::OfferKind::kHandOver);
  // Each kind only its own flags: consent on an export, digests on a
  // hand-over; a digest only where the flag says digests came.
  const uint32_t allowed =
      proto::kOfferPausesItself |
      (o->kind == proto::OfferKind::kExport ? proto::kOfferAllowsHandOver
                                            : proto::kOfferRegionDigests);
  FUZZ_CHECK((o->flags & ~allowed) == 0);
  if ((o->flags & proto::kOfferRegionDigests) == 0) {
    for (const proto::OfferedRegion& r : o->regions) FUZZ_CHECK(r.digest == 0);
  }
  FUZZ_CHECK(!o->regions.empty() &&
             o->regions.size() <= proto::kMaxHandoffRegions);
  FUZZ_CHECK(in.size() <= proto::kMaxOfferBytes);
  constexpr uint64_t kPage = base::kSmallPageSize;
  std::vector<const proto::OfferedRegion*> sorted;
  for (const proto::OfferedRegion& r : o->regions) {
    FUZZ_CHECK(r.length >= kPage && r.length % kPage == 0);
    FUZZ_CHECK(r.base % kPage == 0 && r.fd_offset % kPage == 0);
    FUZZ_CHECK(r.base + r.length > r.base);
    FUZZ_CHECK(r.fd_offset + r.length > r.fd_offset);
    FUZZ_CHECK(r.name.size() <= proto::kMaxHandoffName);
    sorted.push_back(&r);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const proto::OfferedRegion* a, const proto::OfferedRegion* b) {
              return a->base < b->base;
            });
  for (size_t i = 1; i < sorted.size(); ++i) {
    FUZZ_CHECK(sorted[i - 1]->base + sorted[i - 1]->length <= sorted[i]->base);
    FUZZ_CHECK(sorted[i - 1]->id != sorted[i]->id);
  }
  for (size_t i = 0; i < o->regions.size(); ++i) {
    for (size_t j = i + 1; j < o->regions.size(); ++j) {
      FUZZ_CHECK(o->regions[i].id != o->regions[j].id);
    }
  }

  absl::StatusOr<std::vector<uint8_t>> out = proto::EncodeOffer(*o);
  FUZZ_CHECK(out.ok());
  FUZZ_CHECK(out->size() == in.size() &&
             std::equal(out->begin(), out->end(), in.begin()));
  absl::StatusOr<proto::Offer> again = proto::DecodeOffer(*out);
  FUZZ_CHECK(again.ok() && *again == *o);
}

void FuzzCommand(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::CommandMessage> c = proto::DecodeCommand(in);
  if (!c.ok()) return;
  FUZZ_CHECK(in.size() == proto::kCommandBytes);
  const uint16_t t = static_cast<uint16_t>(c->type);
  FUZZ_CHECK(t >= static_cast<uint16_t>(proto::HandoffCommand::kPause) &&
             t <= static_cast<uint16_t>(proto::HandoffCommand::kRefused));
  // A grant carries one descriptor per region; a refusal a known reason.
  if (c->type == proto::HandoffCommand::kHandOverGrant) {
    FUZZ_CHECK(c->value >= 1 && c->value <= proto::kMaxHandoffRegions);
  }
  if (c->type == proto::HandoffCommand::kRefused) {
    FUZZ_CHECK(c->value >= 1 && c->value <= 4);
  }
  const std::vector<uint8_t> out = proto::EncodeCommand(*c);
  FUZZ_CHECK(out.size() == in.size() &&
             std::equal(out.begin(), out.end(), in.begin()));
  absl::StatusOr<proto::CommandMessage> again = proto::DecodeCommand(out);
  FUZZ_CHECK(again.ok() && *again == *c);
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::Span<const uint8_t> message(data + 1, size - 1);
  if ((data[0] & 1) == 0) {
    ramferry::fuzz::FuzzOffer(message);
  } else {
    ramferry::fuzz::FuzzCommand(message);
  }
  return 0;
}
