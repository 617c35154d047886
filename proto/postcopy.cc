#include "proto/postcopy.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"
#include "base/page_size.h"
#include "base/status_macros.h"
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

// A missing-pages message's fixed part, checked against the `ranges_bytes`
// that follow it. The size check comes before any allocation, so a count
// cannot make us reserve memory the payload does not back.
absl::Status CheckMissingPagesFixed(uint32_t region_id, uint32_t flags,
                                    uint32_t count, size_t ranges_bytes) {
  if ((flags & ~kMissingPagesLast) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "missing-pages message for region %d has unknown flags 0x%x; a peer "
        "that sends them speaks a newer protocol",
        region_id, flags & ~kMissingPagesLast));
  }
  if (count > kMaxMissingRanges) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "missing-pages message for region %d has %d ranges; at most %d fit "
        "one message (split the set with SplitMissingPages)",
        region_id, count, kMaxMissingRanges));
  }
  if (count == 0 && (flags & kMissingPagesLast) == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "missing-pages message for region %d has no ranges and is not the "
        "last; only the last message of a set may be empty",
        region_id));
  }
  if (ranges_bytes != kMissingRangeBytes * size_t{count}) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "missing-pages message for region %d announces %d ranges (%d bytes) "
        "but carries %d bytes of ranges",
        region_id, count, kMissingRangeBytes * size_t{count}, ranges_bytes));
  }
  return absl::OkStatus();
}

// The region a missing-pages message names, from the session's table.
absl::StatusOr<const RegionInfo*> MissingPagesRegion(
    absl::Span<const RegionInfo> regions, uint32_t region_id) {
  const RegionInfo* region = FindRegion(regions, region_id);
  if (region == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "missing-pages message names region %d, which is not in the "
        "session's region table",
        region_id));
  }
  if (region->page_size == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "region %d has page size 0 in the region table", region_id));
  }
  return region;
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

std::vector<uint8_t> EncodeMissingPagesFrame(const MissingPages& msg) {
  std::vector<uint8_t> frame = StartFrame(ControlType::kMissingPages);
  EncodeMissingPages(msg, &frame);
  FinishFrame(frame);
  return frame;
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
  RAMFERRY_RETURN_IF_ERROR(
      CheckMissingPagesFixed(m.region_id, flags, count, r.remaining()));
  m.last = (flags & kMissingPagesLast) != 0;
  RAMFERRY_ASSIGN_OR_RETURN(const RegionInfo* region,
                            MissingPagesRegion(regions, m.region_id));
  m.ranges.resize(count);
  for (PageRange& range : m.ranges) {
    range.first = r.U64();
    range.count = r.U64();
  }
  const std::string what =
      absl::StrFormat("missing-pages message for region %d", m.region_id);
  RAMFERRY_RETURN_IF_ERROR(ValidatePageRanges(
      m.ranges, region->length / region->page_size, 0, what.c_str()));
  return m;
}

std::vector<uint8_t> EncodePageRequest(const PageRequest& request) {
  std::vector<uint8_t> frame = StartFrame(ControlType::kPageRequest);
  WireWriter w(&frame);
  w.U32(request.region_id);
  w.U32(static_cast<uint32_t>(request.pages.size()));
  for (uint64_t page : request.pages) w.U64(page);
  FinishFrame(frame);
  return frame;
}

absl::StatusOr<PageRequest> DecodePageRequest(
    absl::Span<const uint8_t> payload, absl::Span<const RegionInfo> regions) {
  WireReader r(payload);
  PageRequest q;
  q.region_id = r.U32();
  const uint32_t count = r.U32();
  if (!r.ok() || count == 0 || count > kMaxPageRequestPages ||
      r.remaining() != 8 * size_t{count}) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page request of %d bytes: want 8 bytes and 1 to %d pages of 8 "
        "bytes each",
        payload.size(), kMaxPageRequestPages));
  }
  const RegionInfo* region = FindRegion(regions, q.region_id);
  if (region == nullptr || region->page_size != base::kSmallPageSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page request names region %d, which is not a post-copy region of "
        "the session (4 KiB pages)",
        q.region_id));
  }
  const uint64_t page_count = region->length / region->page_size;
  q.pages.resize(count);
  for (size_t i = 0; i < count; ++i) {
    q.pages[i] = r.U64();
    if (q.pages[i] >= page_count || (i > 0 && q.pages[i] <= q.pages[i - 1])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "page request for region %d: page %d (entry %d) is past the "
          "region's %d pages or not above the one before; pages must "
          "ascend, each once",
          q.region_id, q.pages[i], i, page_count));
    }
  }
  return q;
}

std::vector<uint8_t> EncodePageData(uint32_t region_id, uint64_t first_page,
                                    uint32_t page_count, const uint8_t* pages) {
  std::vector<uint8_t> frame = StartFrame(ControlType::kPageData);
  const size_t bytes =
      pages == nullptr ? 0 : size_t{page_count} * base::kSmallPageSize;
  frame.reserve(frame.size() + kPageDataFixedBytes + bytes);
  WireWriter w(&frame);
  w.U32(region_id);
  w.U32(pages == nullptr ? kPageDataZero : 0);
  w.U64(first_page);
  w.U32(page_count);
  w.U32(0);
  if (pages != nullptr) w.Bytes({pages, bytes});
  FinishFrame(frame);
  return frame;
}

absl::StatusOr<PageData> DecodePageData(absl::Span<const uint8_t> payload,
                                        absl::Span<const RegionInfo> regions) {
  WireReader r(payload);
  PageData d;
  d.region_id = r.U32();
  const uint32_t flags = r.U32();
  d.first_page = r.U64();
  d.page_count = r.U32();
  const uint32_t reserved = r.U32();
  if (!r.ok() || (flags & ~kPageDataZero) != 0 || reserved != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page data of %d bytes: a truncated head, unknown flags 0x%x or a "
        "reserved field that is not zero",
        payload.size(), flags));
  }
  d.zero = (flags & kPageDataZero) != 0;
  const RegionInfo* region = FindRegion(regions, d.region_id);
  if (region == nullptr || region->page_size != base::kSmallPageSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page data names region %d, which is not a post-copy region of the "
        "session (4 KiB pages)",
        d.region_id));
  }
  const uint64_t page_count = region->length / region->page_size;
  if (d.page_count == 0 || d.page_count > kMaxPageDataPages ||
      d.first_page >= page_count || d.page_count > page_count - d.first_page) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page data for region %d: pages [%d, +%d) are not 1 to %d pages "
        "inside its %d pages",
        d.region_id, d.first_page, d.page_count, kMaxPageDataPages,
        page_count));
  }
  const size_t want = d.zero ? 0 : size_t{d.page_count} * base::kSmallPageSize;
  if (r.remaining() != want) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page data for region %d carries %d bytes for %d %spages; want %d",
        d.region_id, r.remaining(), d.page_count, d.zero ? "zero " : "", want));
  }
  d.bytes = payload.subspan(kPageDataFixedBytes);
  return d;
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
