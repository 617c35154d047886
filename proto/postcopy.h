// Post-copy wire formats (encode, decode, validation; no I/O): the set of
// pages the destination does not hold at the switch.
//
// At the switch the source pauses its workload and tells the destination,
// region by region, which pages it lacks (pages never sent, or written
// since they were last sent). The destination drops those pages so they
// fault, and fetches them on demand. A page left out of this set is taken
// to be current at the destination, so a decoder that let a bad set
// through would leave stale memory in a running workload: every message is
// checked against the region table before a page is dropped.
//
// MISSING_PAGES payload (big-endian, like every format in proto/):
//    0 u32 region_id      a region of the session's region table
//    4 u32 flags          bit 0 kMissingPagesLast: the region's set ends
//                         with this message; other bits zero
//    8 u32 range_count    <= kMaxMissingRanges; 0 only on the last message
//   12 range_count x { u64 first_page, u64 page_count }
// Ranges are in pages of the region's page size: page_count >= 1, the
// whole range inside the region, and the ranges ascending with a gap of at
// least one page between neighbours (adjacent ranges are merged by the
// encoder), within a message and across the messages of one region
// (MissingPagesChecker). So one set has exactly one encoding.
//
// The source sends SplitMissingPages(...) for every region on the control
// connection; the destination decodes each message against its table,
// runs it through one MissingPagesChecker and applies its ranges
// (UffdPlacer::DropPages) as it goes, so no whole set is held in memory;
// once the checker is complete() it registers and answers POSTCOPY_ARMED.
//
// PAGE_REQUEST payload (destination -> source; the pages threads are
// blocked on, sorted, each once):
//    0 u32 region_id
//    4 u32 page_count     1 to kMaxPageRequestPages
//    8 page_count x u64 page index, strictly ascending, inside the region
//
// PAGE_DATA payload (source -> destination; an answer, one run of pages):
//    0 u32 region_id
//    4 u32 flags          bit 0 kPageDataZero: every page of the run is
//                         zero and no bytes follow; other bits zero
//    8 u64 first_page
//   16 u32 page_count     1 to kMaxPageDataPages, inside the region
//   20 u32 reserved, zero
//   24 page_count x page size bytes (none with kPageDataZero)
#ifndef RAMFERRY_PROTO_POSTCOPY_H_
#define RAMFERRY_PROTO_POSTCOPY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/page_size.h"
#include "proto/control.h"

namespace ramferry::proto {

inline constexpr uint32_t kMaxPageRequestPages = 4096;
inline constexpr size_t kMaxPageRequestPayload =
    8 + 8 * size_t{kMaxPageRequestPages};
inline constexpr uint32_t kPageDataZero = 1u << 0;
inline constexpr size_t kPageDataFixedBytes = 24;
inline constexpr uint32_t kMaxPageDataPages = 64;
inline constexpr size_t kMaxPageDataPayload =
    kPageDataFixedBytes + size_t{kMaxPageDataPages} * base::kSmallPageSize;

// [first, first + count) in pages of a region.
struct PageRange {
  uint64_t first = 0;
  uint64_t count = 0;
  // Callers check first + count against the region first (see
  // ValidatePageRanges), so this never wraps for a valid range.
  uint64_t end() const { return first + count; }
  bool operator==(const PageRange&) const = default;
};

inline constexpr uint32_t kMissingPagesLast = 1u << 0;
inline constexpr size_t kMissingPagesFixedBytes = 12;
inline constexpr size_t kMissingRangeBytes = 16;
// 512 KiB of ranges a message, the same bound as a VERIFY_RESULT: a
// fragmented set goes as several messages instead of one huge one.
inline constexpr uint32_t kMaxMissingRanges = 32768;
inline constexpr size_t kMaxMissingPagesPayload =
    kMissingPagesFixedBytes + kMissingRangeBytes * size_t{kMaxMissingRanges};

struct MissingPages {
  uint32_t region_id = 0;
  bool last = false;
  std::vector<PageRange> ranges;
  bool operator==(const MissingPages&) const = default;
};

// Checks that `ranges` is a canonical set of pages of a region with
// `page_count` pages: each count >= 1, each range inside the region (no
// wrap of first + count), ascending, with at least one page between
// neighbours, and the first starting at or after `from` (the end of what
// came before it, plus one, for a continuation; 0 for a whole set).
// `what` names the set in the error, which also says how to fix it.
absl::Status ValidatePageRanges(absl::Span<const PageRange> ranges,
                                uint64_t page_count, uint64_t from,
                                const char* what);

// Appends the payload of `msg` to `out` (a frame builder's buffer). The
// message must satisfy what DecodeMissingPages checks; the encoder does
// not repair it.
void EncodeMissingPages(const MissingPages& msg, std::vector<uint8_t>* out);
// The whole MISSING_PAGES frame of `msg`.
std::vector<uint8_t> EncodeMissingPagesFrame(const MissingPages& msg);

// The messages that carry `ranges` (a canonical set of region
// `region_id`) in order: at most `max_ranges` ranges each (1 to
// kMaxMissingRanges), the last flagged kMissingPagesLast. An empty set is
// one empty last message, so the destination learns that the region is
// whole.
std::vector<MissingPages> SplitMissingPages(
    uint32_t region_id, absl::Span<const PageRange> ranges,
    uint32_t max_ranges = kMaxMissingRanges);

// Decodes one payload and validates it against `regions` (the session's
// region table): known region, known flags, exact size for its range
// count, count bound, canonical ranges inside the region. Trusts nothing
// in `payload`.
absl::StatusOr<MissingPages> DecodeMissingPages(
    absl::Span<const uint8_t> payload, absl::Span<const RegionInfo> regions);

struct PageRequest {
  uint32_t region_id = 0;
  std::vector<uint64_t> pages;
  bool operator==(const PageRequest&) const = default;
};

// A whole PAGE_REQUEST frame; `request` must satisfy DecodePageRequest.
std::vector<uint8_t> EncodePageRequest(const PageRequest& request);
absl::StatusOr<PageRequest> DecodePageRequest(
    absl::Span<const uint8_t> payload, absl::Span<const RegionInfo> regions);

struct PageData {
  uint32_t region_id = 0;
  bool zero = false;
  uint64_t first_page = 0;
  uint32_t page_count = 0;
  // The pages' bytes, inside the decoded payload; empty when `zero`.
  absl::Span<const uint8_t> bytes;
};

// A whole PAGE_DATA frame of the `page_count` pages at `pages` (which hold
// page_count x base::kSmallPageSize bytes), or of zero pages with `pages`
// null. The run must satisfy DecodePageData.
std::vector<uint8_t> EncodePageData(uint32_t region_id, uint64_t first_page,
                                    uint32_t page_count, const uint8_t* pages);
// Checks the region (known, 4 KiB pages), the run (inside it, bounded)
// and the exact size.
absl::StatusOr<PageData> DecodePageData(absl::Span<const uint8_t> payload,
                                        absl::Span<const RegionInfo> regions);

// The order rules across messages, which a stateless decoder cannot see:
// per region, each message continues after the previous one's last range
// (with a gap: the encoder never splits a range), nothing follows the last
// message, and the set is complete once every region of the table had its
// last message. Keeps O(regions) state, never the ranges themselves.
class MissingPagesChecker {
 public:
  explicit MissingPagesChecker(absl::Span<const RegionInfo> regions);

  // `msg` must have come from DecodeMissingPages with the same table (its
  // ranges are not checked against the region again). On error the
  // checker is unchanged, and the session must end: a set with a hole is
  // not repaired.
  absl::Status Accept(const MissingPages& msg);

  bool complete() const { return regions_done_ == regions_.size(); }
  // Pages accepted so far, over every region.
  uint64_t missing_pages() const { return missing_pages_; }

 private:
  struct RegionState {
    uint64_t next = 0;  // the lowest page the next range may start at
    bool done = false;
  };
  absl::flat_hash_map<uint32_t, RegionState> regions_;
  size_t regions_done_ = 0;
  uint64_t missing_pages_ = 0;
};

}  // namespace ramferry::proto

#endif  // RAMFERRY_PROTO_POSTCOPY_H_
