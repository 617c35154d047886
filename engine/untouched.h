// How FindUntouchedRanges (ramferry/untouched.h) reads the kernel: the
// pure pieces, exposed for tests.
#ifndef RAMFERRY_ENGINE_UNTOUCHED_H_
#define RAMFERRY_ENGINE_UNTOUCHED_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ramferry/region.h"
#include "ramferry/untouched.h"

namespace ramferry::engine {

using ramferry::ByteRange;
using ramferry::FindUntouchedRanges;
using ramferry::UntouchedScope;

// ---- The pure pieces, exposed for tests. ----

// Whether a 4 KiB piece of a private anonymous VMA with these PAGEMAP_SCAN
// categories reads as zero: not present and not swapped (nothing was ever
// stored, or it was discarded), or present on the zero page.
bool AnonymousPieceReadsZero(uint64_t categories);

// `range` shrunk to the `align` boundaries inside it; length 0 if none.
ByteRange AlignInward(ByteRange range, uint64_t align);

// The whole `page_size` pages covered by the union of `pieces` (any order,
// any alignment, may overlap or touch): sorted, merged, page-aligned. A
// page partly covered is left out, which is what makes a 2 MiB page with
// one 4 KiB piece of data stay out.
std::vector<ByteRange> ToPageRanges(absl::Span<const ByteRange> pieces,
                                    uint64_t page_size);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_UNTOUCHED_H_
