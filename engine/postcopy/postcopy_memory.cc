#include "engine/postcopy/postcopy_memory.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"
#include "base/page_size.h"
#include "base/proc_maps.h"
#include "base/status_macros.h"
#include "base/status_util.h"

namespace ramferry::engine {

using base::ClassifyVma;
using base::MapsEntry;
using base::VmaKind;

namespace {

// OK for private anonymous memory, which userfaultfd can fill; otherwise
// why `e` cannot take post-copy, and what to map instead.
absl::Status RefusePostcopyMapping(const MapsEntry& e, uint32_t region_id) {
  switch (ClassifyVma(e)) {
    case VmaKind::kPrivateAnonymous:
      return absl::OkStatus();
    case VmaKind::kSharedFile:
      return absl::UnimplementedError(absl::StrFormat(
          "post-copy of region %d: [0x%x, 0x%x) is a shared mapping "
          "(\"%s\"); post-copy of shared memory needs userfaultfd MINOR "
          "mode and UFFDIO_CONTINUE, which is not supported yet: use "
          "private anonymous memory for a post-copy destination",
          region_id, e.start, e.end, e.path));
    case VmaKind::kOther:
      break;
  }
  return absl::UnimplementedError(absl::StrFormat(
      "post-copy of region %d: [0x%x, 0x%x) (\"%s\", %s) is not private "
      "anonymous memory (hugetlbfs, a private file mapping or a special "
      "mapping); post-copy places 4 KiB pages into private anonymous "
      "memory only: map the region with MAP_PRIVATE|MAP_ANONYMOUS",
      region_id, e.start, e.end, e.path, e.shared ? "shared" : "private"));
}

}  // namespace

absl::Status CheckPostcopyMappings(std::string_view maps, uint64_t begin,
                                   uint64_t end, uint32_t region_id) {
  // The lowest address of the region not yet seen in a good mapping.
  uint64_t covered = begin;
  absl::Status refused;
  const absl::Status read = base::ForEachMapping(
      maps, base::MapsFile::kMaps, "/proc/self/maps", [&](const MapsEntry& e) {
        if (covered >= end) return false;
        if (e.end <= covered) return true;
        if (e.start > covered) return false;  // a gap: reported below
        refused = RefusePostcopyMapping(e, region_id);
        if (!refused.ok()) return false;
        covered = std::min(e.end, end);
        return covered < end;
      });
  if (!read.ok()) {
    return base::Annotate(read,
                          absl::StrFormat("post-copy of region %d", region_id));
  }
  RAMFERRY_RETURN_IF_ERROR(refused);
  if (covered < end) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "post-copy of region %d: address 0x%x of [0x%x, 0x%x) is not "
        "mapped; the region must be mapped whole",
        region_id, covered, begin, end));
  }
  return absl::OkStatus();
}

absl::Status CheckPostcopyRegion(const Region& region) {
  if (region.page_size != base::kSmallPageSize) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "region %d has %d-byte pages; post-copy places 4 KiB pages only "
        "(huge pages are not supported yet)",
        region.id, region.page_size));
  }
  RAMFERRY_ASSIGN_OR_RETURN(std::string maps,
                            base::ReadProcFile("/proc/self/maps"));
  const auto begin = reinterpret_cast<uint64_t>(region.base);
  return CheckPostcopyMappings(maps, begin, begin + region.length, region.id);
}

}  // namespace ramferry::engine
