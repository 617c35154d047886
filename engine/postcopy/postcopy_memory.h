// Which memory a post-copy destination can register: the check on
// /proc/self/maps that UffdPlacer::Create makes, apart so that it can be
// tested on any text.
//
// MISSING mode with UFFDIO_COPY needs private anonymous memory: dropping a
// page (MADV_DONTNEED) must make it absent, so that the next touch faults
// to the handler. A shared mapping keeps its bytes in the file (page
// cache) after MADV_DONTNEED, so a fault would never come and the stale
// bytes would stay; post-copy of a shared file needs MINOR mode and
// UFFDIO_CONTINUE, which is not supported yet.
#ifndef RAMFERRY_ENGINE_POSTCOPY_POSTCOPY_MEMORY_H_
#define RAMFERRY_ENGINE_POSTCOPY_POSTCOPY_MEMORY_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ramferry/region.h"

namespace ramferry::engine {

// OK when every byte of [begin, end) lies in private anonymous mappings of
// `maps` (the text of /proc/<pid>/maps), with no gap; otherwise an error
// that names the first mapping (or gap) in the way, region `region_id`,
// and what to use instead.
absl::Status CheckPostcopyMappings(std::string_view maps, uint64_t begin,
                                   uint64_t end, uint32_t region_id);

// Both: OK when `region` can take post-copy here.
absl::Status CheckPostcopyRegion(const Region& region);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_POSTCOPY_POSTCOPY_MEMORY_H_
