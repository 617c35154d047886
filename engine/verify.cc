#include "engine/verify.h"

#include <xxhash.h>

namespace ramferry::engine {

void PageDigests(const Region& region, uint64_t first_page,
                 absl::Span<uint64_t> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = XXH3_64bits(region.page(first_page + i), region.page_size);
  }
}

}  // namespace ramferry::engine
