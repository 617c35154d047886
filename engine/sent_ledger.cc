#include "engine/sent_ledger.h"

namespace ramferry::engine {

SentLedger::SentLedger(size_t channels, absl::Span<const Region> regions)
    : regions_(regions),
      bitmaps_(channels),
      ptrs_(channels),
      touched_(channels) {
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
  std::vector<Word>& touched = touched_[channel];
  const uint64_t page_size = regions_[region].page_size;
  for (uint64_t offset : offsets) {
    const uint64_t page = offset / page_size;
    const size_t word = page / 64;
    // Only this thread sets ledger bits, so an empty word is one not yet
    // listed (or taken since, and listed again).
    if (bits.PeekWord(word) == 0) touched.push_back({region, word});
    bits.Set(page);
  }
}

void SentLedger::Clear(size_t channel) {
  for (const Word& w : touched_[channel]) {
    bitmaps_[channel][w.region]->TakeWord(w.index);
  }
  touched_[channel].clear();
}

void SentLedger::ClearAll() {
  for (size_t c = 0; c < bitmaps_.size(); ++c) Clear(c);
}

}  // namespace ramferry::engine
