// A fixed-size set of pages, one bit each, safe to use from any thread
// without a lock. Every operation is sequentially consistent: the post-copy
// placer relies on that for the Dekker-style handshake between the thread
// that places a page (clear "awaiting", then take "fault pending") and the
// fault reader (set "fault pending", then test "awaiting"): at least one of
// the two sees the other's write, so no pending fault is forgotten.
//
// Pages at or past size() are never set: setters clip, queries answer
// "not set".
#ifndef RAMFERRY_ENGINE_PAGES_ATOMIC_PAGE_SET_H_
#define RAMFERRY_ENGINE_PAGES_ATOMIC_PAGE_SET_H_

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>

namespace ramferry::engine {

class AtomicPageSet {
 public:
  explicit AtomicPageSet(uint64_t pages)
      : pages_(pages), words_(new std::atomic<uint64_t>[(pages + 63) / 64]) {
    for (uint64_t w = 0; w < (pages + 63) / 64; ++w) words_[w].store(0);
  }

  uint64_t size() const { return pages_; }

  bool Test(uint64_t page) const {
    return page < pages_ && (words_[page / 64].load() & Bit(page)) != 0;
  }
  // Sets `page`; true if this call set it (it was clear).
  bool TestAndSet(uint64_t page) {
    if (page >= pages_) return false;
    return (words_[page / 64].fetch_or(Bit(page)) & Bit(page)) == 0;
  }
  // Clears `page`; true if this call cleared it (it was set).
  bool TestAndClear(uint64_t page) {
    if (page >= pages_) return false;
    return (words_[page / 64].fetch_and(~Bit(page)) & Bit(page)) != 0;
  }

  // Sets [first, first + count), clipped to size(). Returns how many pages
  // this call set (were clear before).
  uint64_t SetRange(uint64_t first, uint64_t count) {
    uint64_t n = 0;
    ForEachWord(first, count, [&](uint64_t w, uint64_t mask) {
      n += std::popcount(~words_[w].fetch_or(mask) & mask);
    });
    return n;
  }

  // Clears [first, first + count), clipped to size(), calling
  // on_cleared(page) for each page this call cleared (was set), in
  // ascending order. Returns how many.
  template <typename F>
  uint64_t ClearRange(uint64_t first, uint64_t count, F on_cleared) {
    uint64_t n = 0;
    ForEachWord(first, count, [&](uint64_t w, uint64_t mask) {
      uint64_t was = words_[w].fetch_and(~mask) & mask;
      n += std::popcount(was);
      for (; was != 0; was &= was - 1) {
        on_cleared(w * 64 + std::countr_zero(was));
      }
    });
    return n;
  }
  uint64_t ClearRange(uint64_t first, uint64_t count) {
    return ClearRange(first, count, [](uint64_t) {});
  }

  // The first set page in [page, end), or `end` (clipped to size()).
  uint64_t NextSet(uint64_t page, uint64_t end) const {
    return Next(page, end, /*want_set=*/true);
  }
  // The first clear page in [page, end), or `end` (clipped to size()).
  uint64_t NextClear(uint64_t page, uint64_t end) const {
    return Next(page, end, /*want_set=*/false);
  }
  bool AnySet(uint64_t first, uint64_t count) const {
    const uint64_t end = ClipEnd(first, count);
    return first < end && NextSet(first, end) < end;
  }

  uint64_t Count() const {
    uint64_t n = 0;
    for (uint64_t w = 0; w < (pages_ + 63) / 64; ++w) {
      n += std::popcount(words_[w].load());
    }
    return n;
  }

  // Calls f(page) for every set page, ascending: a snapshot per word.
  template <typename F>
  void ForEachSet(F f) const {
    for (uint64_t w = 0; w < (pages_ + 63) / 64; ++w) {
      for (uint64_t bits = words_[w].load(); bits != 0; bits &= bits - 1) {
        f(w * 64 + std::countr_zero(bits));
      }
    }
  }

 private:
  static uint64_t Bit(uint64_t page) { return uint64_t{1} << (page % 64); }

  // min(first + count, size()), without forming a sum that can wrap.
  uint64_t ClipEnd(uint64_t first, uint64_t count) const {
    if (first >= pages_) return first;
    return count > pages_ - first ? pages_ : first + count;
  }

  // f(word, mask) for the words [first, first + count) touches.
  template <typename F>
  void ForEachWord(uint64_t first, uint64_t count, F f) {
    const uint64_t end = ClipEnd(first, count);
    while (first < end) {
      const uint64_t in_word = std::min<uint64_t>(64 - first % 64, end - first);
      const uint64_t mask = in_word == 64 ? ~uint64_t{0}
                                          : ((uint64_t{1} << in_word) - 1)
                                                << (first % 64);
      f(first / 64, mask);
      first += in_word;
    }
  }

  uint64_t Next(uint64_t page, uint64_t end, bool want_set) const {
    end = std::min(end, pages_);
    while (page < end) {
      const unsigned bit = page % 64;
      uint64_t bits = words_[page / 64].load();
      if (!want_set) bits = ~bits;
      bits &= ~uint64_t{0} << bit;
      if (bits != 0) {
        return std::min(end, page - bit + std::countr_zero(bits));
      }
      page += 64 - bit;
    }
    return end;
  }

  uint64_t pages_;
  std::unique_ptr<std::atomic<uint64_t>[]> words_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_PAGES_ATOMIC_PAGE_SET_H_
