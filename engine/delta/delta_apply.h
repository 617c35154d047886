// Destination: the delta records of one data packet (kFeatureDeltaPages),
// applied to the pages they stand for, all or none.
#ifndef RAMFERRY_ENGINE_DELTA_DELTA_APPLY_H_
#define RAMFERRY_ENGINE_DELTA_DELTA_APPLY_H_

#include <sys/uio.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/pages/held_pages.h"
#include "ramferry/region.h"

namespace ramferry::engine {

// The bytes of the records `entries` (a validated packet's page entries)
// name, which follow its whole pages in the payload.
uint64_t DeltaRecordBytes(absl::Span<const uint64_t> entries,
                          uint32_t page_size);

// Applies `records` (the packet's records, back to back, in entry order:
// exactly DeltaRecordBytes of them) to the pages of `region` (index
// `index`) that `entries` name, once every record is well formed
// (proto::CheckDelta) and every page it changes is `held`: otherwise
// INVALID_ARGUMENT, naming the packet (`packet_num`) and page, and no byte
// written. `applied` and `applied_offsets` get each changed page and its
// region offset, for the digests and page sets a landing updates.
absl::Status ApplyPacketDeltas(const Region& region, size_t index,
                               absl::Span<const uint64_t> entries,
                               absl::Span<const uint8_t> records,
                               const HeldPages& held, uint64_t packet_num,
                               std::vector<iovec>* applied,
                               std::vector<uint64_t>* applied_offsets);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_DELTA_DELTA_APPLY_H_
