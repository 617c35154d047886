#include "engine/scheduler.h"

#include <bit>

#include "absl/strings/str_format.h"

namespace ramferry::engine {

Scheduler::Scheduler(absl::Span<CommandRing* const> rings,
                     absl::Span<const Region> regions, uint32_t packet_pages,
                     std::function<absl::Status(size_t)> after_commit,
                     SentLedger* ledger)
    : rings_(rings.begin(), rings.end()),
      regions_(regions),
      packet_pages_(packet_pages),
      after_commit_(std::move(after_commit)),
      ledger_(ledger) {}

size_t Scheduler::LeastLoaded() {
  size_t best = rings_.size();
  uint64_t best_load = UINT64_MAX;
  for (size_t i = 0; i < rings_.size(); ++i) {
    const size_t r = (next_ + i) % rings_.size();
    if (rings_[r]->aborted()) continue;
    const uint64_t load = rings_[r]->backlog_pages();
    if (load < best_load) {
      best = r;
      best_load = load;
    }
  }
  next_ = (next_ + 1) % rings_.size();
  return best;
}

absl::Status Scheduler::Commit(size_t ring, const Command& batch) {
  if (ledger_ != nullptr) {
    // Before the push: once pushed, the consumer may release the slot.
    ledger_->Record(ring, batch.region,
                    absl::MakeConstSpan(batch.offsets, batch.page_count));
  }
  rings_[ring]->CommitPush();
  return after_commit_ ? after_commit_(ring) : absl::OkStatus();
}

absl::StatusOr<Scheduler::Scheduled> Scheduler::ScheduleRound(
    absl::Span<DirtyBitmap* const> dirty, uint64_t round) {
  if (dirty.size() != regions_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d dirty bitmaps for %d regions", dirty.size(), regions_.size()));
  }
  const auto aborted = [] {
    return absl::AbortedError("every channel stopped while scheduling");
  };
  for (uint32_t r = 0; r < regions_.size(); ++r) {
    if (dirty[r] == nullptr || dirty[r]->pages() != regions_[r].page_count()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("dirty bitmap %d covers %d pages; region %d has %d",
                          r, dirty[r] == nullptr ? 0 : dirty[r]->pages(),
                          regions_[r].id, regions_[r].page_count()));
    }
  }
  Scheduled total;
  for (uint32_t r = 0; r < regions_.size(); ++r) {
    DirtyBitmap& bits = *dirty[r];
    const uint64_t page_size = regions_[r].page_size;
    size_t ring = 0;
    Command* batch = nullptr;
    for (size_t w = 0; w < bits.words(); ++w) {
      // A plain read first: the locked exchange costs ~5 ns even on an
      // empty word, and most words of a sparse round are empty. A bit set
      // after the read is taken next round.
      if (bits.PeekWord(w) == 0) continue;
      uint64_t word = bits.TakeWord(w);
      while (word != 0) {
        const uint64_t page = w * 64 + std::countr_zero(word);
        word &= word - 1;
        if (batch == nullptr) {
          while (batch == nullptr) {
            ring = LeastLoaded();
            if (ring == rings_.size()) return aborted();
            // nullptr: the ring was aborted while this waited for room in
            // it; the next pick skips it.
            batch = rings_[ring]->BeginPush();
          }
          batch->type = CommandType::kWrite;
          batch->region = r;
          batch->page_count = 0;
          batch->barrier_seq = 0;
          batch->round = round;
        }
        batch->offsets[batch->page_count++] = page * page_size;
        ++total.pages;
        total.bytes += page_size;
        if (batch->page_count == packet_pages_) {
          if (absl::Status s = Commit(ring, *batch); !s.ok()) return s;
          batch = nullptr;
        }
      }
    }
    if (batch != nullptr) {
      if (absl::Status s = Commit(ring, *batch); !s.ok()) return s;
    }
  }
  return total;
}

}  // namespace ramferry::engine
