// One bit per page: the set of pages a round must send. Writers may mark
// pages from any thread while a round consumes the bitmap; a page marked
// after its word was consumed is sent in the next round, never lost.
//
// Marking releases and taking acquires: a writer that stores to a page and
// then marks it makes the store visible to whoever takes the bit. Were the
// mark relaxed, a weakly ordered CPU (ARM64, POWER) could show the bit
// before the store; the round would send the old bytes, and with the bit
// consumed, the new ones never.
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

  uint64_t pages() const { return pages_; }
  size_t words() const { return words_; }

  void Set(uint64_t page) {
    word(page).fetch_or(Bit(page), std::memory_order_release);
  }
  bool Test(uint64_t page) const {
    return (words_ptr_[page / 64].load(std::memory_order_relaxed) &
            Bit(page)) != 0;
  }
  void SetRange(uint64_t first, uint64_t count);
  void SetAll() { SetRange(0, pages_); }
  void ClearAll();
  uint64_t Count() const;

  // Atomically takes word `w` (64 pages from page 64*w) and clears it.
  uint64_t TakeWord(size_t w) {
    return words_ptr_[w].exchange(0, std::memory_order_acquire);
  }
  // Atomically clears the bits of word `w` in `mask`; returns which of
  // them were set.
  uint64_t TakeBits(size_t w, uint64_t mask) {
    return words_ptr_[w].fetch_and(~mask, std::memory_order_acquire) & mask;
  }
  // Non-destructive read of word `w`: a hint only (a set bit read here
  // still has to be taken before its page is read).
  uint64_t PeekWord(size_t w) const {
    return words_ptr_[w].load(std::memory_order_relaxed);
  }
  // ORs `bits` into word `w` (a bit past pages() is ignored).
  void OrWord(size_t w, uint64_t bits);

 private:
  static uint64_t Bit(uint64_t page) { return uint64_t{1} << (page % 64); }
  std::atomic<uint64_t>& word(uint64_t page) { return words_ptr_[page / 64]; }

  uint64_t pages_;
  size_t words_;
  std::unique_ptr<std::atomic<uint64_t>[]> words_ptr_;
};

}  // namespace ramferry

#endif  // RAMFERRY_DIRTY_BITMAP_H_
