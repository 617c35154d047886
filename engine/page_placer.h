// What a channel's receiver needs of post-copy (PostcopyTarget is the one
// implementation): whether the switch has happened, a bracket around each
// pre-copy landing, and placement of the pages that arrive after it. The
// seam keeps ChannelReceiver, a data-plane loop, apart from post-copy's
// userfaultfd machinery (engine/postcopy/).
#ifndef RAMFERRY_ENGINE_PAGE_PLACER_H_
#define RAMFERRY_ENGINE_PAGE_PLACER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace ramferry::engine {

class PagePlacer {
 public:
  virtual ~PagePlacer() = default;

  // Whether the switch happened: from here on the regions' missing pages
  // are written only through Place / PlaceZero, never by a plain write.
  // Acquire: a thread that sees true sees the placement machinery.
  virtual bool armed() const = 0;

  // Before and after a pre-copy packet lands with plain writes (not armed
  // yet). BeginLanding refuses once the switch has begun, when a plain
  // write to a dropped page would wait in the kernel for good; a refused
  // landing must not call EndLanding.
  virtual absl::Status BeginLanding() = 0;
  virtual void EndLanding() = 0;

  // Armed: `pages` pages at `first_page` of the region at table index
  // `index`, from `src` (outside the region), or zero pages. Only the
  // pages still awaited are written; the first copy of a page wins.
  virtual absl::Status Place(size_t index, uint64_t first_page,
                             const uint8_t* src, uint64_t pages) = 0;
  virtual absl::Status PlaceZero(size_t index, uint64_t first_page,
                                 uint64_t pages) = 0;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_PAGE_PLACER_H_
