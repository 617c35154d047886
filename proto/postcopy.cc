#include "proto/postcopy.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"
#include "proto/wire.h"

namespace ramferry::proto {
namespace {

const RegionInfo* FindRegion(absl::Span<const RegionInfo> regions,
                             uint32_t id) {
  for (const RegionInfo& r : regions) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

}  // namespace

absl::Status ValidatePageRanges(absl::Span<const PageRange> ranges,
                                uint64_t page_count, uint64_t from,
                                const char* what) {
  uint64_t next = from;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const PageRange& r = ranges[i];
    if (r.count == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: range %d starting at page %d is empty; leave empty ranges out",
          what, i, r.first));
    }
    // Written so that nothing wraps: first + count is formed only once
    // both are known to fit in the region.
    if (r.first >= page_count || r.count > page_count - r.first) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: range %d (first page %d, %d pages) runs past the region's %d "
          "pages; every range must lie inside its region",
          what, i, r.first, r.count, page_count));
    }
    if (r.first < next) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: range %d starts at page %d, before page %d; ranges must be "
          "ascending, disjoint and not adjacent (merge touching ranges)",
          what, i, r.first, next));
    }
    // One past the end, plus the gap; cannot wrap, end <= page_count.
    next = r.end() + 1;
  }
  return absl::OkStatus();
}

void EncodeMissingPages(const MissingPages& msg, std::vector<uint8_t>* out) {
  out->reserve(out->size() + kMissingPagesFixedBytes +
               kMissingRangeBytes * msg.ranges.size());
  WireWriter w(out);
  w.U32(msg.region_id);
  w.U32(msg.last ? kMissingPagesLast : 0);
  w.U32(static_cast<uint32_t>(msg.ranges.size()));
  for (const PageRange& r : msg.ranges) {
    w.U64(r.first);
    w.U64(r.count);
  }
}

std::vector<MissingPages> SplitMissingPages(uint32_t region_id,
                                            absl::Span<const PageRange> ranges,
                                            uint32_t max_ranges) {
  max_ranges = std::clamp<uint32_t>(max_ranges, 1, kMaxMissingRanges);
  std::vector<MissingPages> out;
  size_t at = 0;
  do {
    const size_t n = std::min<size_t>(max_ranges, ranges.size() - at);
    MissingPages m;
    m.region_id = region_id;
    m.ranges.assign(ranges.begin() + at, ranges.begin() + at + n);
    at += n;
    m.last = at == ranges.size();
    out.push_back(std::move(m));
  } while (at < ranges.size());
  return out;
}

absl::StatusOr<MissingPages> DecodeMissingPages(
    absl::Span<const uint8_t> payload, absl::Span<const RegionInfo> regions) {
  WireReader r(payload);
  MissingPages m;
  m.region_id = r.U32();
  const uint32_t flags = r.U32();
  const uint32_t count = r.U32();
  if (!r.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "missing-pages message of %d bytes is shorter than its %d-byte fixed "
        "part",
        payload.size(), kMissingPagesFixedBytes));
  }
  if ((flags & ~kMissingPagesLast) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "missing-pages message for region %d has unknown flags 0x%x; a peer "
        "that sends them speaks a newer protocol",
        m.region_id, flags & ~kMissingPagesLast));
  }
  m.last = (flags & kMissingPagesLast) != 0;
  if (count > kMaxMissingRanges) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "missing-pages message for region %d has %d ranges; at most %d fit "
        "one message (split the set with SplitMissingPages)",
        m.region_id, count, kMaxMissingRanges));
  }
  if (count == 0 && !m.last) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "missing-pages message for region %d has no ranges and is not the "
        "last; only the last message of a set may be empty",
        m.region_id));
  }
  // The size check comes before any allocation, so a count cannot make us
  // reserve memory the payload does not back.
  if (r.remaining() != kMissingRangeBytes * size_t{count}) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "missing-pages message for region %d announces %d ranges (%d bytes) "
        "but carries %d bytes of ranges",
        m.region_id, count, kMissingRangeBytes * size_t{count}, r.remaining()));
  }
  const RegionInfo* region = FindRegion(regions, m.region_id);
  if (region == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "missing-pages message names region %d, which is not in the "
        "session's region table",
        m.region_id));
  }
  if (region->page_size == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "region %d has page size 0 in the region table", m.region_id));
  }
  m.ranges.resize(count);
  for (PageRange& range : m.ranges) {
    range.first = r.U64();
    range.count = r.U64();
  }
  const std::string what =
      absl::StrFormat("missing-pages message for region %d", m.region_id);
  if (absl::Status s = ValidatePageRanges(
          m.ranges, region->length / region->page_size, 0, what.c_str());
      !s.ok()) {
    return s;
  }
  return m;
}

MissingPagesChecker::MissingPagesChecker(absl::Span<const RegionInfo> regions) {
  for (const RegionInfo& r : regions) regions_.try_emplace(r.id);
}

absl::Status MissingPagesChecker::Accept(const MissingPages& msg) {
  auto it = regions_.find(msg.region_id);
  if (it == regions_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "missing-pages message names region %d, which is not in the "
        "session's region table",
        msg.region_id));
  }
  RegionState& state = it->second;
  if (state.done) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "missing-pages message for region %d after its last one; each "
        "region's set ends with exactly one last message",
        msg.region_id));
  }
  uint64_t pages = 0;
  uint64_t next = state.next;
  for (size_t i = 0; i < msg.ranges.size(); ++i) {
    const PageRange& r = msg.ranges[i];
    if (r.count == 0 || r.first < next || r.end() < r.first) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "missing-pages message for region %d: range %d starts at page %d, "
          "before page %d, where the set so far allows it; ranges must "
          "ascend across messages too, with a gap between neighbours",
          msg.region_id, i, r.first, next));
    }
    next = r.end() + 1;
    pages += r.count;
  }
  state.next = next;
  missing_pages_ += pages;
  if (msg.last) {
    state.done = true;
    ++regions_done_;
  }
  return absl::OkStatus();
}

}  // namespace ramferry::proto
