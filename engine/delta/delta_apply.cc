#include "engine/delta/delta_apply.h"

#include "absl/strings/str_format.h"
#include "base/status_util.h"
#include "proto/packet.h"
#include "proto/page_delta.h"

namespace ramferry::engine {

uint64_t DeltaRecordBytes(absl::Span<const uint64_t> entries,
                          uint32_t page_size) {
  uint64_t bytes = 0;
  for (uint64_t entry : entries) bytes += proto::DeltaBytesOf(entry, page_size);
  return bytes;
}

absl::Status ApplyPacketDeltas(const Region& region, size_t index,
                               absl::Span<const uint64_t> entries,
                               absl::Span<const uint8_t> records,
                               const HeldPages& held, uint64_t packet_num,
                               std::vector<iovec>* applied,
                               std::vector<uint64_t>* applied_offsets) {
  const uint32_t page_size = region.page_size;
  applied->clear();
  applied_offsets->clear();
  // Every record checked, and every page it changes held, before a byte
  // changes: a bad record writes nothing.
  size_t at = 0;
  for (uint64_t entry : entries) {
    const uint32_t n = proto::DeltaBytesOf(entry, page_size);
    if (n == 0) continue;
    const uint64_t offset = entry & ~uint64_t{page_size - 1};
    if (!held.Test(index, offset / page_size)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "bad packet %d: a delta for page %d of region %d, which this "
          "destination never received (a delta changes a page the "
          "destination holds)",
          packet_num, offset / page_size, region.id));
    }
    if (n > records.size() - at) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "bad packet %d: its delta records run past the payload", packet_num));
    }
    if (absl::Status s = proto::CheckDelta(records.subspan(at, n), page_size);
        !s.ok()) {
      return base::Annotate(
          s, absl::StrFormat("bad packet %d, page %d of region %d", packet_num,
                             offset / page_size, region.id));
    }
    at += n;
    auto* page = static_cast<uint8_t*>(region.base) + offset;
    applied->push_back({page, page_size});
    applied_offsets->push_back(offset);
  }
  if (at != records.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bad packet %d: %d bytes after its delta records",
                        packet_num, records.size() - at));
  }
  at = 0;
  for (uint64_t entry : entries) {
    const uint32_t n = proto::DeltaBytesOf(entry, page_size);
    if (n == 0) continue;
    const uint64_t offset = entry & ~uint64_t{page_size - 1};
    proto::ApplyDelta(records.subspan(at, n),
                      static_cast<uint8_t*>(region.base) + offset, page_size);
    at += n;
  }
  return absl::OkStatus();
}

}  // namespace ramferry::engine
