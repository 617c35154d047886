// Page digests for end-to-end verification: both ends hash every page the
// same way and compare.
#ifndef RAMFERRY_ENGINE_VERIFY_H_
#define RAMFERRY_ENGINE_VERIFY_H_

#include <cstdint>

#include "absl/types/span.h"
#include "ramferry/region.h"

namespace ramferry::engine {

// XXH3-64 of each page in [first, first + out.size()) of `region`.
void PageDigests(const Region& region, uint64_t first_page,
                 absl::Span<uint64_t> out);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_VERIFY_H_
