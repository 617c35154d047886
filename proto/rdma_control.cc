#include "proto/rdma_control.h"

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "proto/wire.h"

namespace ramferry::proto {
namespace {

size_t EntryBytes(RdmaControlType t) {
  switch (t) {
    case RdmaControlType::kRegionKeys:
      return 24;
    case RdmaControlType::kRegisterRequest:
    case RdmaControlType::kCompress:
    case RdmaControlType::kCredits:
      return 8;
    case RdmaControlType::kRegisterResult:
      return 16;
  }
  return 0;
}

absl::Status CheckMagicAndType(uint32_t magic, uint16_t type) {
  if (magic != kRdmaControlMagic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("RDMA control magic 0x%08x", magic));
  }
  if (type < 1 || type > 5) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown RDMA control type %d", type));
  }
  return absl::OkStatus();
}

// `count` entries of type `t`, which `payload` bytes must hold exactly:
// checked before any is read, so that no entry's reads run past the end
// (DecodeEntry does not look at the reader's ok()).
absl::Status CheckEntries(RdmaControlType t, uint16_t count, size_t payload) {
  const uint16_t max_count =
      t == RdmaControlType::kCredits ? 1 : kMaxRdmaControlEntries;
  if (count == 0 || count > max_count) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RDMA control count %d outside [1, %d]", count, max_count));
  }
  if (payload != count * EntryBytes(t)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RDMA control of %d entries has %d payload bytes; want %d", count,
        payload, count * EntryBytes(t)));
  }
  return absl::OkStatus();
}

absl::Status DecodeRegisterResult(WireReader* r, RdmaControl* c) {
  ChunkKey k;
  k.rkey = r->U32();
  if (r->U32() != 0) {
    return absl::InvalidArgumentError(
        "RDMA register result reserved word is not zero");
  }
  k.addr = r->U64();
  c->results.push_back(k);
  return absl::OkStatus();
}

absl::Status DecodeCredits(WireReader* r, RdmaControl* c) {
  c->credits = r->U32();
  if (r->U32() != 0) {
    return absl::InvalidArgumentError("RDMA credits reserved word is not zero");
  }
  if (c->credits == 0) {
    return absl::InvalidArgumentError("RDMA credits message grants none");
  }
  return absl::OkStatus();
}

// Reads the next entry (of c's type) into `c`.
absl::Status DecodeEntry(WireReader* r, RdmaControl* c) {
  switch (c->type) {
    case RdmaControlType::kRegionKeys: {
      RegionKey k;
      k.region = r->U32();
      k.rkey = r->U32();
      k.addr = r->U64();
      k.length = r->U64();
      c->region_keys.push_back(k);
      return absl::OkStatus();
    }
    case RdmaControlType::kRegisterRequest:
    case RdmaControlType::kCompress:
      c->chunks.push_back({r->U32(), r->U32()});
      return absl::OkStatus();
    case RdmaControlType::kRegisterResult:
      return DecodeRegisterResult(r, c);
    case RdmaControlType::kCredits:
      return DecodeCredits(r, c);
  }
  return absl::OkStatus();
}

}  // namespace

size_t RdmaControlMaxBytes() {
  return kRdmaControlHeaderBytes + 24 * size_t{kMaxRdmaControlEntries};
}

bool IsRdmaControl(absl::Span<const uint8_t> m) {
  return m.size() >= 4 && Load32(m.data()) == kRdmaControlMagic;
}

std::vector<uint8_t> EncodeRdmaControl(const RdmaControl& c) {
  std::vector<uint8_t> out;
  WireWriter w(&out);
  w.U32(kRdmaControlMagic);
  w.U16(static_cast<uint16_t>(c.type));
  switch (c.type) {
    case RdmaControlType::kRegionKeys:
      w.U16(static_cast<uint16_t>(c.region_keys.size()));
      for (const RegionKey& k : c.region_keys) {
        w.U32(k.region);
        w.U32(k.rkey);
        w.U64(k.addr);
        w.U64(k.length);
      }
      break;
    case RdmaControlType::kRegisterRequest:
    case RdmaControlType::kCompress:
      w.U16(static_cast<uint16_t>(c.chunks.size()));
      for (const ChunkRef& r : c.chunks) {
        w.U32(r.region);
        w.U32(r.chunk);
      }
      break;
    case RdmaControlType::kRegisterResult:
      w.U16(static_cast<uint16_t>(c.results.size()));
      for (const ChunkKey& k : c.results) {
        w.U32(k.rkey);
        w.U32(0);
        w.U64(k.addr);
      }
      break;
    case RdmaControlType::kCredits:
      w.U16(1);
      w.U32(c.credits);
      w.U32(0);
      break;
  }
  return out;
}

absl::StatusOr<RdmaControl> DecodeRdmaControl(absl::Span<const uint8_t> in) {
  WireReader r(in);
  const uint32_t magic = r.U32();
  const uint16_t type = r.U16();
  const uint16_t count = r.U16();
  if (!r.ok()) return absl::InvalidArgumentError("RDMA control truncated");
  RAMFERRY_RETURN_IF_ERROR(CheckMagicAndType(magic, type));
  RdmaControl c;
  c.type = static_cast<RdmaControlType>(type);
  RAMFERRY_RETURN_IF_ERROR(CheckEntries(c.type, count, r.remaining()));
  for (uint16_t i = 0; i < count; ++i) {
    RAMFERRY_RETURN_IF_ERROR(DecodeEntry(&r, &c));
  }
  return c;
}

}  // namespace ramferry::proto
