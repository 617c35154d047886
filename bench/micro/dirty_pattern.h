// Dirty-page patterns shared by the bitmap and scheduler benchmarks.
#ifndef RAMFERRY_BENCH_MICRO_DIRTY_PATTERN_H_
#define RAMFERRY_BENCH_MICRO_DIRTY_PATTERN_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "ramferry/dirty_bitmap.h"

namespace ramferry::bench {

// The words of a bitmap of `pages` pages where each page is dirty with
// probability `percent`/100 (independently, fixed seed); 0 and 100 are
// exact.
inline std::vector<uint64_t> DirtyPattern(uint64_t pages, int percent,
                                          uint64_t seed = 42) {
  std::vector<uint64_t> words((pages + 63) / 64, 0);
  if (percent <= 0) return words;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(0, 99);
  for (uint64_t p = 0; p < pages; ++p) {
    if (percent >= 100 || dist(rng) < percent) {
      words[p / 64] |= uint64_t{1} << (p % 64);
    }
  }
  return words;
}

inline uint64_t PatternPages(const std::vector<uint64_t>& words) {
  uint64_t n = 0;
  for (uint64_t w : words) n += static_cast<uint64_t>(__builtin_popcountll(w));
  return n;
}

// Ors the pattern into `bits` (whose taken words are zero).
inline void Refill(DirtyBitmap& bits, const std::vector<uint64_t>& words) {
  for (size_t w = 0; w < words.size(); ++w) {
    if (words[w] != 0) bits.OrWord(w, words[w]);
  }
}

}  // namespace ramferry::bench

#endif  // RAMFERRY_BENCH_MICRO_DIRTY_PATTERN_H_
