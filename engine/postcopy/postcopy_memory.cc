#include "engine/postcopy/postcopy_memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/errno_status.h"
#include "base/status_macros.h"
#include "engine/untouched.h"

namespace ramferry::engine {

using base::ErrnoStatus;

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

absl::StatusOr<std::string> ReadProcSelfMaps() {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "post-copy: open /proc/self/maps");
  std::string text;
  char buf[16384];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return ErrnoStatus(err, "post-copy: read /proc/self/maps");
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

absl::Status CheckPostcopyRegion(const Region& region) {
  if (region.page_size != 4096) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "region %d has %d-byte pages; post-copy places 4 KiB pages only "
        "(huge pages are not supported yet)",
        region.id, region.page_size));
  }
  RAMFERRY_ASSIGN_OR_RETURN(std::string maps, ReadProcSelfMaps());
  const auto begin = reinterpret_cast<uint64_t>(region.base);
  return CheckPostcopyMappings(maps, begin, begin + region.length, region.id);
}

}  // namespace ramferry::engine
