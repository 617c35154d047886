// One bit per page: the set of pages a round must send. Writers may mark
// pages from any thread while a round consumes the bitmap; a page marked
// after its word was consumed is sent in the next round, never lost.
//
// Marking releases and taking acquires: a writer that stores to a page and
// then marks it makes the store visible to whoever takes the bit. Were the
// mark relaxed, a weakly ordered CPU (ARM64, POWER) could show the bit
// before the store; the round would send the old bytes, and with the bit
// consumed, the new ones never.
//
// A bitmap owns its words, or is a view over words the caller owns
// (DirtyBitmap::View, what the C API's send round passes): the same
// operations then read and clear the caller's words in place, through
// std::atomic_ref, with nothing copied.
#ifndef RAMFERRY_DIRTY_BITMAP_H_
#define RAMFERRY_DIRTY_BITMAP_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace ramferry {

class DirtyBitmap {
 public:
  explicit DirtyBitmap(uint64_t pages);

  // A view over `words`: (pages + 63) / 64 words, 8-byte aligned, owned by
  // the caller and alive as long as the view. Page p is bit p % 64 of
  // words[p / 64]. Nothing is copied: rounds take (read and clear) the
  // caller's words atomically, so while a round may run the caller marks
  // them atomically too, with release order (C11 atomic_fetch_or_explicit
  // or __atomic_fetch_or(..., __ATOMIC_RELEASE)). Bits past `pages` in the
  // last word are ignored, never taken. The words are not cleared.
  static DirtyBitmap View(uint64_t* words, uint64_t pages);

  uint64_t pages() const { return pages_; }
  size_t words() const { return words_; }

  void Set(uint64_t page) {
    Word(page / 64).fetch_or(Bit(page), std::memory_order_release);
  }
  bool Test(uint64_t page) const {
    return (Word(page / 64).load(std::memory_order_relaxed) & Bit(page)) != 0;
  }
  void SetRange(uint64_t first, uint64_t count);
  void SetAll() { SetRange(0, pages_); }
  void ClearAll();
  uint64_t Count() const;

  // Atomically takes word `w` (64 pages from page 64*w) and clears it.
  uint64_t TakeWord(size_t w) {
    return Word(w).exchange(0, std::memory_order_acquire) & Valid(w);
  }
  // Atomically clears the bits of word `w` in `mask`; returns which of
  // them were set.
  uint64_t TakeBits(size_t w, uint64_t mask) {
    mask &= Valid(w);
    return Word(w).fetch_and(~mask, std::memory_order_acquire) & mask;
  }
  // Non-destructive read of word `w`: a hint only (a set bit read here
  // still has to be taken before its page is read).
  uint64_t PeekWord(size_t w) const {
    return Word(w).load(std::memory_order_relaxed) & Valid(w);
  }
  // ORs `bits` into word `w` (a bit past pages() is ignored).
  void OrWord(size_t w, uint64_t bits);

 private:
  DirtyBitmap(uint64_t* words, uint64_t pages);
  static uint64_t Bit(uint64_t page) { return uint64_t{1} << (page % 64); }
  std::atomic_ref<uint64_t> Word(size_t w) const {
    return std::atomic_ref<uint64_t>(words_ptr_[w]);
  }
  // The bits of word `w` that are pages.
  uint64_t Valid(size_t w) const {
    return w + 1 == words_ ? last_word_mask_ : ~uint64_t{0};
  }

  uint64_t pages_;
  size_t words_;
  uint64_t last_word_mask_;
  std::unique_ptr<uint64_t[]> owned_;  // empty for a view
  uint64_t* words_ptr_;
};

}  // namespace ramferry

#endif  // RAMFERRY_DIRTY_BITMAP_H_
