#include "engine/postcopy_memory.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "engine/untouched.h"

namespace ramferry::engine {

absl::Status CheckPostcopyMappings(std::string_view maps, uint64_t begin,
                                   uint64_t end, uint32_t region_id) {
  // The lowest address of the region not yet seen in a good mapping.
  uint64_t covered = begin;
  for (absl::string_view text :
       absl::StrSplit(absl::string_view(maps.data(), maps.size()), '\n',
                      absl::SkipEmpty())) {
    if (covered >= end) break;
    const std::string_view line(text.data(), text.size());
    std::optional<MapsEntry> e = ParseMapsLine(line);
    if (!e) {
      return absl::InternalError(absl::StrFormat(
          "post-copy of region %d: unexpected line in /proc/self/maps: \"%s\"",
          region_id, line));
    }
    if (e->end <= covered) continue;
    if (e->start > covered) break;  // a gap: reported below
    switch (ClassifyVma(*e)) {
      case VmaKind::kPrivateAnonymous:
        covered = std::min(e->end, end);
        continue;
      case VmaKind::kSharedFile:
        return absl::UnimplementedError(absl::StrFormat(
            "post-copy of region %d: [0x%x, 0x%x) is a shared mapping "
            "(\"%s\"); post-copy of shared memory needs userfaultfd MINOR "
            "mode and UFFDIO_CONTINUE, which is not supported yet: use "
            "private anonymous memory for a post-copy destination",
            region_id, e->start, e->end, e->path));
      case VmaKind::kOther:
        return absl::UnimplementedError(absl::StrFormat(
            "post-copy of region %d: [0x%x, 0x%x) (\"%s\", %s) is not "
            "private anonymous memory (hugetlbfs, a private file mapping or "
            "a special mapping); post-copy places 4 KiB pages into private "
            "anonymous memory only: map the region with "
            "MAP_PRIVATE|MAP_ANONYMOUS",
            region_id, e->start, e->end, e->path,
            e->shared ? "shared" : "private"));
    }
  }
  if (covered < end) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "post-copy of region %d: address 0x%x of [0x%x, 0x%x) is not "
        "mapped; the region must be mapped whole",
        region_id, covered, begin, end));
  }
  return absl::OkStatus();
}

}  // namespace ramferry::engine
