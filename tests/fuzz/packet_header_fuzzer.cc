// Fuzzes the data-channel packet header decoders, DecodePacketFixed,
// DecodePageOffsets and DecodeZeroRanges, with the channel, page bound and
// region length taken from the first input byte (see PacketHeaderConfig).
// Each input is decoded twice: without and with kFeatureZeroPages and
// kFeatureCompressedPages.
//
// Properties: every accepted header obeys the rules the receiver relies on
// (its channel, page count bound, SYNC/FINISH carry nothing, ZERO_RANGES
// only with the capability); every accepted offset is page-aligned (but
// for the zero flag, only with the capability) and names a page wholly
// inside the region; every accepted zero range is non-empty, aligned,
// inside the region and after the one before it; and re-encoding what was
// decoded gives back the input bytes exactly (the format has no field a
// decoder may normalise).
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/packet.h"
#include "proto/stream.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

bool ValidPageSize(uint32_t s) {
  // DecodePageOffsets' precondition, which the receiver meets by matching
  // the header's page size to a validated region's.
  return s >= 512 && (s & (s - 1)) == 0;
}

void CheckZeroRanges(const proto::PacketHeader& h,
                     absl::Span<const uint8_t> raw, uint64_t region_length) {
  std::vector<proto::ZeroRange> ranges(h.page_count / 2);
  if (!proto::DecodeZeroRanges(h, raw, region_length, absl::MakeSpan(ranges))
           .ok()) {
    return;
  }
  uint64_t end_of_previous = 0;
  for (const proto::ZeroRange& r : ranges) {
    FUZZ_CHECK(r.length > 0 && r.offset % h.page_size == 0 &&
               r.length % h.page_size == 0);
    FUZZ_CHECK(r.offset <= region_length &&
               r.length <= region_length - r.offset);
    FUZZ_CHECK(r.offset >= end_of_previous);
    end_of_previous = r.offset + r.length;
  }
}

void FuzzPacketHeader(absl::Span<const uint8_t> in,
                      const PacketHeaderConfig& cfg, bool zero_pages) {
  // The second pass turns on the zero-page and compression fields, and
  // stream packets.
  const proto::PacketFeatures features{.next_header_size = cfg.next_header_size,
                                       .zero_pages = zero_pages,
                                       .compressed_pages = zero_pages,
                                       .streams = zero_pages};
  absl::StatusOr<proto::PacketHeader> h =
      proto::DecodePacketFixed(in, cfg.channel, cfg.max_pages, features);
  if (!h.ok()) return;
  FUZZ_CHECK(h->channel == cfg.channel);
  FUZZ_CHECK((h->flags & ~proto::kKnownPacketFlags) == 0);
  if (h->compressed_bytes != 0) {
    FUZZ_CHECK(zero_pages && h->is_data());
    FUZZ_CHECK(h->compressed_bytes <= proto::kMaxCompressedBytes);
  }
  if (h->is_data()) {
    FUZZ_CHECK(h->page_count >= 1 && h->page_count <= cfg.max_pages);
  } else if (h->is_stream()) {
    // A stream's payload is bounded, and its end stays below the bound
    // without wrapping (proto/stream.h).
    FUZZ_CHECK(zero_pages && h->page_count == 0);
    const proto::StreamFrame f = proto::StreamFrameOf(*h);
    FUZZ_CHECK(f.stream < proto::kMaxStreams);
    FUZZ_CHECK(f.end
                   ? f.bytes == 0
                   : f.bytes >= 1 && f.bytes <= proto::kMaxStreamPayloadBytes);
    FUZZ_CHECK(f.offset + f.bytes <= proto::kMaxStreamOffset);
  } else if (h->is_zero_ranges()) {
    FUZZ_CHECK(zero_pages);
    FUZZ_CHECK(h->page_count >= 2 && h->page_count <= cfg.max_pages &&
               h->page_count % 2 == 0);
  } else {
    FUZZ_CHECK(h->page_count == 0 && h->region_id == 0 && h->page_size == 0);
  }
  // An announced next header is one the receiver may read whole: a real
  // header size within the negotiated bound; never after FINISH, never
  // without the capability.
  if (const uint32_t n = h->next_header_bytes; n != 0) {
    FUZZ_CHECK(cfg.next_header_size);
    FUZZ_CHECK((h->flags & proto::kPacketFinish) == 0);
    FUZZ_CHECK(n >= proto::kPacketFixedBytes &&
               n <= proto::PacketHeaderBytes(cfg.max_pages) &&
               (n - proto::kPacketFixedBytes) % 8 == 0);
  }

  std::vector<uint64_t> offsets(h->page_count);
  auto raw = in.subspan(proto::kPacketFixedBytes);
  if (h->is_zero_ranges() && ValidPageSize(h->page_size)) {
    CheckZeroRanges(*h, raw, cfg.region_length);
    return;
  }
  if (h->is_data() && ValidPageSize(h->page_size)) {
    absl::Status s = proto::DecodePageOffsets(
        *h, raw, cfg.region_length, zero_pages, absl::MakeSpan(offsets));
    if (!s.ok()) return;
    FUZZ_CHECK(raw.size() >= 8 * size_t{h->page_count});
    for (uint64_t entry : offsets) {
      FUZZ_CHECK(zero_pages || !proto::IsZeroPageEntry(entry));
      const uint64_t off = proto::PageOffsetOf(entry);
      FUZZ_CHECK(off % h->page_size == 0);
      FUZZ_CHECK(cfg.region_length >= h->page_size);
      FUZZ_CHECK(off <= cfg.region_length - h->page_size);
    }
  } else if (h->names_region()) {
    return;  // not a header the receiver would read offsets for
  }

  // Round trip, byte for byte.
  const size_t bytes = proto::PacketHeaderBytes(h->page_count);
  std::vector<uint8_t> out(bytes);
  FUZZ_CHECK(proto::EncodePacketHeader(*h, offsets, absl::MakeSpan(out)) ==
             bytes);
  FUZZ_CHECK(in.size() >= bytes);
  FUZZ_CHECK(std::memcmp(out.data(), in.data(), bytes) == 0);
  absl::StatusOr<proto::PacketHeader> again =
      proto::DecodePacketFixed(out, cfg.channel, cfg.max_pages, features);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->flags == h->flags && again->packet_num == h->packet_num &&
             again->round == h->round && again->page_count == h->page_count &&
             again->region_id == h->region_id &&
             again->page_size == h->page_size &&
             again->next_header_bytes == h->next_header_bytes &&
             again->compressed_bytes == h->compressed_bytes);
}

void FuzzPacketHeader(absl::Span<const uint8_t> in) {
  if (in.empty()) return;
  const PacketHeaderConfig cfg = DecodePacketHeaderConfig(in[0]);
  in.remove_prefix(1);
  FuzzPacketHeader(in, cfg, /*zero_pages=*/false);
  FuzzPacketHeader(in, cfg, /*zero_pages=*/true);
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzPacketHeader({data, size});
  return 0;
}
