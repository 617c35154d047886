#include "proto/packet.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "proto/stream.h"
#include "proto/wire.h"

namespace ramferry::proto {

size_t EncodePacketHeader(const PacketHeader& h,
                          absl::Span<const uint64_t> offsets,
                          absl::Span<uint8_t> out) {
  const size_t bytes = PacketHeaderBytes(h.page_count);
  uint8_t* p = out.data();
  Store32(p + 0, kPacketMagic);
  Store16(p + 4, kProtocolVersion);
  Store16(p + 6, h.flags);
  Store32(p + 8, h.channel);
  Store32(p + 12, h.page_count);
  Store64(p + 16, h.packet_num);
  Store64(p + 24, h.round);
  Store32(p + 32, h.region_id);
  Store32(p + 36, h.page_size);
  Store32(p + 40, h.next_header_bytes);
  Store32(p + 44, h.compressed_bytes);
  std::memset(p + kPacketTagOffset, 0, kPacketTagBytes);
  for (uint32_t i = 0; i < h.page_count; ++i) {
    Store64(p + kPacketFixedBytes + size_t{8} * i, offsets[i]);
  }
  return bytes;
}

namespace {

// Without its capability a field is reserved like the rest, and must be
// zero.
absl::Status CheckReserved(const uint8_t* p, PacketFeatures features) {
  for (size_t i = 40; i < kPacketFixedBytes; ++i) {
    if ((i < 44 && features.next_header_size) ||
        (i >= 44 && i < 48 && features.compressed_pages) ||
        (i >= kPacketTagOffset && features.sealed)) {
      continue;
    }
    if (p[i] != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "packet reserved byte %d is 0x%02x, want 0", i, p[i]));
    }
  }
  return absl::OkStatus();
}

// What a packet of its kind may carry: pages (data), range words (zero
// ranges), a stream's bytes (STREAM, STREAM_END) or nothing (SYNC,
// FINISH).
absl::Status CheckPayloadShape(const PacketHeader& h, uint32_t max_pages) {
  if (h.is_stream()) return CheckStreamShape(h);
  if (h.is_data()) {
    if (h.page_count == 0 || h.page_count > max_pages) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "packet page_count %d outside [1, %d]", h.page_count, max_pages));
    }
  } else if (h.is_zero_ranges()) {
    if (h.page_count < 2 || h.page_count > max_pages || h.page_count % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ZERO_RANGES packet carries %d words; want an even count in [2, %d]",
          h.page_count, max_pages));
    }
  } else if (h.page_count != 0 || h.region_id != 0 || h.page_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s packet carries page_count %d region_id %d page_size %d; want 0",
        (h.flags & kPacketSync) ? "SYNC" : "FINISH", h.page_count, h.region_id,
        h.page_size));
  }
  if (const uint32_t c = h.compressed_bytes; c != 0) {
    if (!h.is_data() || c > kMaxCompressedBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "packet says %d compressed bytes; only a data packet may, and at "
          "most %d",
          c, kMaxCompressedBytes));
    }
  }
  return absl::OkStatus();
}

// The size a header announces of the next one: none after FINISH, else
// a header of at most `max_pages` pages.
absl::Status CheckNextHeader(const PacketHeader& h, uint32_t max_pages) {
  const uint32_t n = h.next_header_bytes;
  if (n == 0) return absl::OkStatus();
  if (h.flags & kPacketFinish) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "FINISH packet announces a next header of %d bytes; nothing may "
        "follow FINISH",
        n));
  }
  if (n < kPacketFixedBytes || n > PacketHeaderBytes(max_pages) ||
      (n - kPacketFixedBytes) % sizeof(uint64_t) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "packet announces a next header of %d bytes; want 0 or %d + 8k "
        "bytes for k <= %d pages",
        n, kPacketFixedBytes, max_pages));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PacketHeader> DecodePacketFixed(absl::Span<const uint8_t> fixed,
                                               uint32_t channel,
                                               uint32_t max_pages,
                                               PacketFeatures features) {
  if (fixed.size() < kPacketFixedBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("packet header truncated: %d of %d bytes", fixed.size(),
                        kPacketFixedBytes));
  }
  const uint8_t* p = fixed.data();
  if (uint32_t magic = Load32(p); magic != kPacketMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "packet magic 0x%08x, want 0x%08x", magic, kPacketMagic));
  }
  if (uint16_t v = Load16(p + 4); v != kProtocolVersion) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "packet version %d, this end speaks %d", v, kProtocolVersion));
  }
  PacketHeader h;
  h.flags = Load16(p + 6);
  h.channel = Load32(p + 8);
  h.page_count = Load32(p + 12);
  h.packet_num = Load64(p + 16);
  h.round = Load64(p + 24);
  h.region_id = Load32(p + 32);
  h.page_size = Load32(p + 36);
  h.next_header_bytes = Load32(p + 40);
  h.compressed_bytes = Load32(p + 44);
  // At most one flag: a packet is one thing.
  if ((h.flags & ~kKnownPacketFlags) != 0 || (h.flags & (h.flags - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "packet flags 0x%04x are not a valid combination", h.flags));
  }
  if (h.is_zero_ranges() && !features.zero_pages) {
    return absl::InvalidArgumentError(
        "ZERO_RANGES packet on a session that did not negotiate zero pages");
  }
  if (h.is_stream() && !features.streams) {
    return absl::InvalidArgumentError(
        "STREAM packet on a session that carries no streams");
  }
  if (h.channel != channel) {
    return absl::InvalidArgumentError(
        absl::StrFormat("packet names channel %d but arrived on channel %d",
                        h.channel, channel));
  }
  RAMFERRY_RETURN_IF_ERROR(CheckReserved(p, features));
  RAMFERRY_RETURN_IF_ERROR(CheckPayloadShape(h, max_pages));
  RAMFERRY_RETURN_IF_ERROR(CheckNextHeader(h, max_pages));
  return h;
}

absl::Status DecodePageOffsets(const PacketHeader& h,
                               absl::Span<const uint8_t> raw,
                               uint64_t region_length, bool zero_pages,
                               absl::Span<uint64_t> out) {
  return DecodePageOffsets(h, raw, region_length,
                           PacketFeatures{.zero_pages = zero_pages}, out);
}

absl::Status DecodePageOffsets(const PacketHeader& h,
                               absl::Span<const uint8_t> raw,
                               uint64_t region_length, PacketFeatures features,
                               absl::Span<uint64_t> out) {
  const size_t want = sizeof(uint64_t) * h.page_count;
  if (raw.size() < want || out.size() < h.page_count) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "packet offsets truncated: %d of %d bytes", raw.size(), want));
  }
  // page_size was matched to the region by the caller; it is a power of two.
  const uint64_t mask = uint64_t{h.page_size} - 1;
  for (uint32_t i = 0; i < h.page_count; ++i) {
    const uint64_t entry = Load64(raw.data() + size_t{8} * i);
    const uint64_t low = entry & mask;
    // The low bits are a zero flag alone, or a delta record's size (its
    // bound, MaxDeltaBytes, is what fits them), or nothing.
    const bool flagged =
        (features.zero_pages && low == kZeroPageFlag) ||
        (features.delta_pages && (low & kZeroPageFlag) == 0 && low != 0);
    const uint64_t off = flagged ? entry & ~mask : entry;
    if ((off & mask) != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "page offset %d (index %d) is not aligned to page size %d", off, i,
          h.page_size));
    }
    // Written as a subtraction so a huge offset cannot wrap past the check.
    if (region_length < h.page_size || off > region_length - h.page_size) {
      return absl::OutOfRangeError(absl::StrFormat(
          "page offset %d (index %d) outside region %d of %d bytes", off, i,
          h.region_id, region_length));
    }
    out[i] = entry;
  }
  return absl::OkStatus();
}

absl::Status DecodeZeroRanges(const PacketHeader& h,
                              absl::Span<const uint8_t> raw,
                              uint64_t region_length,
                              absl::Span<ZeroRange> out) {
  const size_t pairs = h.page_count / 2;
  const size_t want = sizeof(uint64_t) * h.page_count;
  if (raw.size() < want || out.size() < pairs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "zero ranges truncated: %d of %d bytes", raw.size(), want));
  }
  const uint64_t mask = uint64_t{h.page_size} - 1;
  uint64_t end_of_previous = 0;
  for (size_t i = 0; i < pairs; ++i) {
    const uint64_t off = Load64(raw.data() + 16 * i);
    const uint64_t len = Load64(raw.data() + 16 * i + 8);
    if (((off | len) & mask) != 0 || len == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "zero range %d (offset %d, %d bytes) is empty or not aligned to "
          "page size %d",
          i, off, len, h.page_size));
    }
    // Subtractions, so no sum can wrap past the checks.
    if (off > region_length || len > region_length - off) {
      return absl::OutOfRangeError(absl::StrFormat(
          "zero range %d (offset %d, %d bytes) outside region %d of %d bytes",
          i, off, len, h.region_id, region_length));
    }
    if (i > 0 && off < end_of_previous) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "zero range %d (offset %d) overlaps or precedes the range before "
          "it (which ends at %d); ranges must ascend",
          i, off, end_of_previous));
    }
    end_of_previous = off + len;
    out[i] = {off, len};
  }
  return absl::OkStatus();
}

}  // namespace ramferry::proto
