#include "engine/scheduler.h"

#include <algorithm>
#include <bit>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace ramferry::engine {

Scheduler::Scheduler(absl::Span<CommandRing* const> rings,
                     absl::Span<const Region> regions, uint32_t packet_pages,
                     std::function<absl::Status(size_t)> after_commit,
                     SentLedger* ledger, uint64_t max_batch_bytes)
    : rings_(rings.begin(), rings.end()),
      regions_(regions),
      packet_pages_(packet_pages),
      max_batch_bytes_(max_batch_bytes),
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

Command* Scheduler::BeginCommand(CommandType type, uint32_t region,
                                 uint64_t round, size_t* ring) {
  Command* c = nullptr;
  while (c == nullptr) {
    *ring = LeastLoaded();
    if (*ring == rings_.size()) return nullptr;
    // nullptr: the ring was aborted while this waited for room in it; the
    // next pick skips it.
    c = rings_[*ring]->BeginPush();
  }
  c->type = type;
  c->region = region;
  c->page_count = 0;
  c->barrier_seq = 0;
  c->round = round;
  return c;
}

absl::StatusOr<uint64_t> Scheduler::ScheduleZeroRanges(
    uint32_t r, DirtyBitmap& bits, absl::Span<const proto::ZeroRange> ranges,
    uint64_t round) {
  const uint64_t page_size = regions_[r].page_size;
  const uint32_t max_words = packet_pages_ & ~uint32_t{1};
  uint64_t taken_pages = 0;
  size_t ring = 0;
  Command* batch = nullptr;
  // Appends pages [first, first + count) to the open command, merging
  // with the range before it where they touch.
  auto add = [&](uint64_t first, uint64_t count) -> absl::Status {
    taken_pages += count;
    if (batch != nullptr && batch->page_count >= 2) {
      uint64_t* last = batch->offsets + batch->page_count - 2;
      if (last[0] + last[1] == first * page_size) {
        last[1] += count * page_size;
        return absl::OkStatus();
      }
    }
    if (batch != nullptr && batch->page_count == max_words) {
      RAMFERRY_RETURN_IF_ERROR(Commit(ring, *batch));
      batch = nullptr;
    }
    if (batch == nullptr) {
      batch = BeginCommand(CommandType::kZeroRanges, r, round, &ring);
      if (batch == nullptr) {
        return absl::AbortedError("every channel stopped while scheduling");
      }
    }
    batch->offsets[batch->page_count++] = first * page_size;
    batch->offsets[batch->page_count++] = count * page_size;
    return absl::OkStatus();
  };
  for (const proto::ZeroRange& z : ranges) {
    const uint64_t first = z.offset / page_size;
    const uint64_t end = first + z.length / page_size;
    // Word by word: only pages whose bits were set are taken (a page the
    // caller did not ask for stays as the destination has it).
    for (uint64_t p = first; p < end;) {
      const uint64_t in_word = std::min<uint64_t>(64 - p % 64, end - p);
      const uint64_t mask = in_word == 64
                                ? ~uint64_t{0}
                                : ((uint64_t{1} << in_word) - 1) << (p % 64);
      uint64_t got = bits.TakeBits(p / 64, mask);
      while (got != 0) {
        const uint64_t lo = std::countr_zero(got);
        const uint64_t run = std::countr_one(got >> lo);
        RAMFERRY_RETURN_IF_ERROR(add(p / 64 * 64 + lo, run));
        got = run + lo >= 64 ? 0 : got & (~uint64_t{0} << (lo + run));
      }
      p += in_word;
    }
  }
  if (batch != nullptr) {
    RAMFERRY_RETURN_IF_ERROR(Commit(ring, *batch));
  }
  return taken_pages;
}

absl::Status Scheduler::CheckRound(
    absl::Span<DirtyBitmap* const> dirty,
    absl::Span<const std::vector<proto::ZeroRange>> zero_ranges) const {
  if (dirty.size() != regions_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d dirty bitmaps for %d regions", dirty.size(), regions_.size()));
  }
  for (uint32_t r = 0; r < regions_.size(); ++r) {
    if (dirty[r] == nullptr || dirty[r]->pages() != regions_[r].page_count()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("dirty bitmap %d covers %d pages; region %d has %d",
                          r, dirty[r] == nullptr ? 0 : dirty[r]->pages(),
                          regions_[r].id, regions_[r].page_count()));
    }
  }
  if (!zero_ranges.empty()) {
    if (zero_ranges.size() != regions_.size() || packet_pages_ < 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%d zero-range lists for %d regions at %d pages per packet (want "
          "one per region and at least 2 pages per packet)",
          zero_ranges.size(), regions_.size(), packet_pages_));
    }
    for (uint32_t r = 0; r < regions_.size(); ++r) {
      uint64_t end_of_previous = 0;
      for (const proto::ZeroRange& z : zero_ranges[r]) {
        const uint64_t mask = regions_[r].page_size - 1;
        if (((z.offset | z.length) & mask) != 0 || z.length == 0 ||
            z.offset < end_of_previous || z.offset > regions_[r].length ||
            z.length > regions_[r].length - z.offset) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "zero range (offset %d, %d bytes) of region %d is not a "
              "sorted, disjoint, page-aligned range inside it",
              z.offset, z.length, regions_[r].id));
        }
        end_of_previous = z.offset + z.length;
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Scheduler::Scheduled> Scheduler::ScheduleRound(
    absl::Span<DirtyBitmap* const> dirty, uint64_t round,
    absl::Span<const std::vector<proto::ZeroRange>> zero_ranges) {
  RAMFERRY_RETURN_IF_ERROR(CheckRound(dirty, zero_ranges));
  const auto aborted = [] {
    return absl::AbortedError("every channel stopped while scheduling");
  };
  Scheduled total;
  for (uint32_t r = 0; r < regions_.size(); ++r) {
    DirtyBitmap& bits = *dirty[r];
    if (!zero_ranges.empty() && !zero_ranges[r].empty()) {
      RAMFERRY_ASSIGN_OR_RETURN(
          uint64_t zeroed, ScheduleZeroRanges(r, bits, zero_ranges[r], round));
      total.pages += zeroed;
      total.bytes += zeroed * regions_[r].page_size;
      total.zero_range_pages += zeroed;
    }
    const uint64_t page_size = regions_[r].page_size;
    uint32_t batch_pages = packet_pages_;
    if (max_batch_bytes_ != 0) {
      batch_pages = static_cast<uint32_t>(
          std::clamp<uint64_t>(max_batch_bytes_ / page_size, 1, packet_pages_));
    }
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
          batch = BeginCommand(CommandType::kWrite, r, round, &ring);
          if (batch == nullptr) return aborted();
        }
        batch->offsets[batch->page_count++] = page * page_size;
        ++total.pages;
        total.bytes += page_size;
        if (batch->page_count == batch_pages) {
          RAMFERRY_RETURN_IF_ERROR(Commit(ring, *batch));
          batch = nullptr;
        }
      }
    }
    if (batch != nullptr) {
      RAMFERRY_RETURN_IF_ERROR(Commit(ring, *batch));
    }
  }
  return total;
}

}  // namespace ramferry::engine
