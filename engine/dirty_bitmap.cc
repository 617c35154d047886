#include "ramferry/dirty_bitmap.h"

#include <algorithm>
#include <bit>

namespace ramferry {

static_assert(std::atomic_ref<uint64_t>::required_alignment ==
                  alignof(uint64_t),
              "caller words (DirtyBitmap::View) need no extra alignment");
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);

namespace {
uint64_t LastWordMask(uint64_t pages) {
  return pages % 64 == 0 ? ~uint64_t{0} : (uint64_t{1} << (pages % 64)) - 1;
}
}  // namespace

DirtyBitmap::DirtyBitmap(uint64_t pages)
    : pages_(pages),
      words_((pages + 63) / 64),
      last_word_mask_(LastWordMask(pages)),
      owned_(new uint64_t[words_]),
      words_ptr_(owned_.get()) {
  ClearAll();
}

DirtyBitmap::DirtyBitmap(uint64_t* words, uint64_t pages)
    : pages_(pages),
      words_((pages + 63) / 64),
      last_word_mask_(LastWordMask(pages)),
      words_ptr_(words) {}

DirtyBitmap DirtyBitmap::View(uint64_t* words, uint64_t pages) {
  return DirtyBitmap(words, pages);
}

void DirtyBitmap::OrWord(size_t w, uint64_t bits) {
  bits &= Valid(w);
  if (bits != 0) Word(w).fetch_or(bits, std::memory_order_release);
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
    Word(w).store(0, std::memory_order_relaxed);
  }
}

uint64_t DirtyBitmap::Count() const {
  uint64_t n = 0;
  for (size_t w = 0; w < words_; ++w) n += std::popcount(PeekWord(w));
  return n;
}

}  // namespace ramferry
