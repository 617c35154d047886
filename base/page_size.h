// The small page: 4 KiB, the one size userfaultfd places (post-copy, the
// hand-over's write tracking) and the hand-off and post-copy protocols
// fix on the wire. The public API names the same number ramferry::kPageSize
// (ramferry/region.h), since public headers include only ramferry/;
// engine/options.cc asserts the two equal.
//
// 64-bit on purpose: masks such as `address & ~(kSmallPageSize - 1)` must
// keep an address's high bits.
#ifndef RAMFERRY_BASE_PAGE_SIZE_H_
#define RAMFERRY_BASE_PAGE_SIZE_H_

#include <cstdint>

namespace ramferry::base {

inline constexpr uint64_t kSmallPageSize = 4096;

}  // namespace ramferry::base

#endif  // RAMFERRY_BASE_PAGE_SIZE_H_
