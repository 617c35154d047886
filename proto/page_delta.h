// A page re-sent as a delta: what changed since the copy the destination
// holds, as XOR runs (kFeatureDeltaPages, proto/packet.h).
//
// A delta record is a sequence of runs, each
//   varint skip    bytes left as they are
//   varint length  bytes that changed, at least 1
//   u8[length]     the new bytes XOR the old
// (varints are LEB128, at most 5 bytes, never longer than needed). The
// runs go in page order and must end inside the page; the record ends
// exactly where its last run does. A page that did not change at all is
// the one run (0, 0): the only run whose length may be 0.
//
// XOR, not the new bytes, so applying a record twice undoes it, and so
// the runs of a counter increment are mostly zero bytes that compress.
//
// Pure functions over buffers: the caller owns the pages, the copies and
// where records go.
#ifndef RAMFERRY_PROTO_PAGE_DELTA_H_
#define RAMFERRY_PROTO_PAGE_DELTA_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ramferry::proto {

// The most bytes a record for a page of `page_size` bytes may take: under
// half the page, which is what fits the low bits of its packet entry
// (proto/packet.h kDeltaLengthShift), and past which the page goes whole.
constexpr uint32_t MaxDeltaBytes(uint32_t page_size) {
  return page_size / 2 - 1;
}

// The most payload, whole pages and records, a data packet that carries
// delta records may have, and so the largest page a delta goes for: the
// source builds such a packet in a buffer of its own and the destination
// reads its records aside, before the packet is authentic, so both ends
// bound those buffers by this, never by what a header asks for.
inline constexpr uint64_t kMaxDeltaPayloadBytes = 8u << 20;

// Brings `copy` (the page as last sent) up to `live` (the page now) one
// 8-byte word at a time, reading each live word once, and writes each
// word's XOR (new ^ old) into `xor_out`. Because a word is read once, what
// `copy` becomes is exactly what `xor_out` describes even while `live`
// is being written. `page_size` is a multiple of 8. Returns whether any
// byte differed.
bool RefreshCopy(const uint8_t* live, uint8_t* copy, uint8_t* xor_out,
                 size_t page_size);

// Encodes the XOR image of one page (`xor_page`, zero where nothing
// changed) as a record into `out`. Returns the record's size, or 0 when it
// would need more than out.size() bytes (the page then goes whole). Runs
// closer than a few bytes are merged: a run's two varints cost more than
// the zero bytes between them.
size_t EncodeDelta(absl::Span<const uint8_t> xor_page, absl::Span<uint8_t> out);

// Checks that `record` is a well-formed record for a page of `page_size`
// bytes: every run inside the page, every varint minimal, nothing after
// the last run. Reads only `record`.
absl::Status CheckDelta(absl::Span<const uint8_t> record, uint32_t page_size);

// Applies a record that CheckDelta accepted to `page` (`page_size` bytes).
void ApplyDelta(absl::Span<const uint8_t> record, uint8_t* page,
                uint32_t page_size);

}  // namespace ramferry::proto

#endif  // RAMFERRY_PROTO_PAGE_DELTA_H_
