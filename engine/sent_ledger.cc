#include "engine/sent_ledger.h"

namespace ramferry::engine {

SentLedger::SentLedger(size_t channels, absl::Span<const Region> regions)
    : regions_(regions), bitmaps_(channels), ptrs_(channels) {
  for (size_t c = 0; c < channels; ++c) {
    for (const Region& r : regions) {
      bitmaps_[c].push_back(std::make_unique<DirtyBitmap>(r.page_count()));
      ptrs_[c].push_back(bitmaps_[c].back().get());
    }
  }
}

void SentLedger::Record(size_t channel, uint32_t region,
                        absl::Span<const uint64_t> offsets) {
  DirtyBitmap& bits = *bitmaps_[channel][region];
  const uint64_t page_size = regions_[region].page_size;
  for (uint64_t offset : offsets) bits.Set(offset / page_size);
}

uint64_t SentLedger::Count(size_t channel) const {
  uint64_t n = 0;
  for (const auto& b : bitmaps_[channel]) n += b->Count();
  return n;
}

void SentLedger::Clear(size_t channel) {
  for (const auto& b : bitmaps_[channel]) b->ClearAll();
}

void SentLedger::ClearAll() {
  for (size_t c = 0; c < bitmaps_.size(); ++c) Clear(c);
}

}  // namespace ramferry::engine
