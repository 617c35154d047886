#include "ramferry/dirty_bitmap.h"

#include <bit>

namespace ramferry {

DirtyBitmap::DirtyBitmap(uint64_t pages)
    : pages_(pages),
      words_((pages + 63) / 64),
      words_ptr_(new std::atomic<uint64_t>[words_]) {
  ClearAll();
}

void DirtyBitmap::OrWord(size_t w, uint64_t bits) {
  if (w == words_ - 1 && pages_ % 64 != 0) {
    bits &= (uint64_t{1} << (pages_ % 64)) - 1;
  }
  if (bits != 0) words_ptr_[w].fetch_or(bits, std::memory_order_release);
}

void DirtyBitmap::SetRange(uint64_t first, uint64_t count) {
  if (first >= pages_) return;
  // Clip without computing first + count, which can wrap past 2^64.
  uint64_t end = count > pages_ - first ? pages_ : first + count;
  while (first < end) {
    uint64_t in_word = std::min<uint64_t>(64 - first % 64, end - first);
    uint64_t bits = in_word == 64
                        ? ~uint64_t{0}
                        : ((uint64_t{1} << in_word) - 1) << (first % 64);
    OrWord(first / 64, bits);
    first += in_word;
  }
}

void DirtyBitmap::ClearAll() {
  for (size_t w = 0; w < words_; ++w) {
    words_ptr_[w].store(0, std::memory_order_relaxed);
  }
}

uint64_t DirtyBitmap::Count() const {
  uint64_t n = 0;
  for (size_t w = 0; w < words_; ++w) n += std::popcount(PeekWord(w));
  return n;
}

}  // namespace ramferry
