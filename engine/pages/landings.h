// What the destination notes of every page that lands, whatever way it
// came: whole (written in place or through the region's file), rebuilt
// from delta records, zero, or placed by post-copy. One rule, in one place:
// a landed page is held (a later delta may apply to it), is data or zero
// as the zero-page elision must know, is no longer unauthentic, and has
// its arrival digest. A new way to land a page calls one of these and
// cannot forget a table.
//
// Every table is optional (null: the session did not negotiate it). The
// channels call a Landings after the bytes are in place and their tag
// checked out; Unfinished is the one call for bytes that are not.
// Thread-compatible over disjoint pages: a page lands on one channel per
// round, and rounds are ordered by the round barrier (post-copy's two
// placement paths race, and only the one that placed a page records it).
#ifndef RAMFERRY_ENGINE_PAGES_LANDINGS_H_
#define RAMFERRY_ENGINE_PAGES_LANDINGS_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "engine/pages/held_pages.h"
#include "engine/pages/unauthentic_pages.h"
#include "engine/pages/zero_pages.h"

namespace ramferry::engine {

// Where Landings records arrival digests: the session's DigestTable
// (engine/verify.h), behind this seam so page bookkeeping need not know
// how pages are hashed.
class LandingDigests {
 public:
  virtual ~LandingDigests() = default;
  // Hashes the pages of `runs` (run i: pages from region offset
  // run_offsets[i]) and records their digests.
  virtual void Record(size_t index, absl::Span<const uint64_t> run_offsets,
                      absl::Span<const iovec> runs) = 0;
  virtual void RecordZero(size_t index, uint64_t first, uint64_t count) = 0;
  // Pages [first, first + count) as the `count` pages at `src` hold them.
  virtual void RecordPlaced(size_t index, uint64_t first, uint64_t count,
                            const uint8_t* src) = 0;
  virtual void RecordZeroPlaced(size_t index, uint64_t first,
                                uint64_t count) = 0;
};

class Landings {
 public:
  struct Tables {
    HeldPages* held = nullptr;
    ZeroPages* zeros = nullptr;
    UnauthenticPages* unauthentic = nullptr;
    LandingDigests* digests = nullptr;
  };
  Landings() = default;
  explicit Landings(const Tables& tables) : t_(tables) {}

  // Taken before a payload's read begins: a landing clears only the marks
  // made before it (UnauthenticPages::Clear).
  uint64_t Epoch() const {
    return t_.unauthentic != nullptr ? t_.unauthentic->Epoch() : 0;
  }

  // Whole pages of region `index` (of `page_size` bytes) in `runs`, from
  // region offsets `run_offsets`, written in place or through the file:
  // authentic, data, digested. They are held once the packet's delta
  // records (for other pages) were applied: Held.
  void Data(size_t index, uint32_t page_size,
            absl::Span<const uint64_t> run_offsets,
            absl::Span<const iovec> runs, uint64_t epoch);
  // Pages rebuilt in place from delta records (held already: a delta
  // applies only to a held page).
  void Delta(size_t index, absl::Span<const uint64_t> run_offsets,
             absl::Span<const iovec> runs);
  // Pages [first, first + count) written as zero, or found zero already.
  void Zero(size_t index, uint64_t first, uint64_t count, uint64_t epoch);
  // The whole pages of a packet, landed (Data) or placed by post-copy,
  // are held: a later delta may apply to them.
  void Held(size_t index, uint32_t page_size,
            absl::Span<const uint64_t> run_offsets,
            absl::Span<const iovec> runs);
  // Post-copy placement records the digests of the pages it placed, and
  // only those (the fault path and the push may race for a page).
  void Placed(size_t index, uint64_t first, uint64_t count, const uint8_t* src);
  void ZeroPlaced(size_t index, uint64_t first, uint64_t count);

  // A payload read in place and then cut or forged: whatever it wrote is
  // data now (a later zero page for it must be written), and, where the
  // stream is sealed (`sealed`), unauthentic until an authentic copy lands.
  void Unfinished(size_t index, uint32_t page_size,
                  absl::Span<const uint64_t> run_offsets,
                  absl::Span<const iovec> runs, bool sealed);

 private:
  Tables t_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_PAGES_LANDINGS_H_
