#include "channels/header_slots.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/status_macros.h"

namespace ramferry::channels {

HeaderSlots::HeaderSlots(uint32_t slots, size_t slot_bytes,
                         CompletionPolicy policy, CompletionSource* source,
                         TransportStats* stats)
    : slot_count_(slots),
      slot_bytes_(slot_bytes),
      policy_(policy),
      source_(source),
      stats_(stats),
      buffers_(new uint8_t[size_t{slots} * slot_bytes]()),
      refs_(slots, 0) {}

template <typename Pred>
absl::Status HeaderSlots::WaitUntil(Pred done) {
  if (done()) return absl::OkStatus();
  uint64_t start = base::MonotonicNs();
  absl::Status s;
  while (s.ok() && !done()) s = source_->Reap(*this, /*block=*/true);
  stats_->completion_wait_ns.Add(base::MonotonicNs() - start);
  return s;
}

absl::StatusOr<absl::Span<uint8_t>> HeaderSlots::Acquire() {
  if (policy_ == CompletionPolicy::kSlot && busy_slots_ > slot_count_ / 2) {
    // Cheap, non-blocking: keeps the slot ahead free most of the time.
    RAMFERRY_RETURN_IF_ERROR(source_->Reap(*this, /*block=*/false));
  }
  const uint32_t slot = current_;
  if (absl::Status s = WaitUntil([&] { return !busy(slot); }); !s.ok()) {
    return s;
  }
  return buffer(slot);
}

void HeaderSlots::Attach(uint32_t token, uint32_t slot) {
  if (pending_.empty()) base_token_ = token;
  pending_.push_back({slot, false});
  if (refs_[slot]++ == 0) {
    ++busy_slots_;
    stats_->max_slots_in_flight.RaiseTo(busy_slots_);
  }
}

absl::Status HeaderSlots::Complete(uint32_t token, bool copied,
                                   bool zero_copy) {
  const uint32_t index = token - base_token_;  // modular: survives 2^32 wrap
  if (index >= pending_.size() || pending_[index].done) {
    return absl::InternalError(absl::StrFormat(
        "completion for token %d that is not outstanding (%d outstanding "
        "from %d)",
        token, outstanding_tokens(), base_token_));
  }
  Pending& p = pending_[index];
  p.done = true;
  ++done_ahead_;
  if (--refs_[p.slot] == 0) --busy_slots_;
  if (zero_copy) {
    stats_->zc_completions.Add();
    if (copied) stats_->zc_copied.Add();
  }
  while (!pending_.empty() && pending_.front().done) {
    pending_.pop_front();
    --done_ahead_;
    ++base_token_;
  }
  return absl::OkStatus();
}

absl::Status HeaderSlots::PacketSent() {
  current_ = (current_ + 1) % slot_count_;
  switch (policy_) {
    case CompletionPolicy::kWrap:
      return current_ == 0 ? Flush() : absl::OkStatus();
    case CompletionPolicy::kEach:
      return Flush();
    case CompletionPolicy::kSlot:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status HeaderSlots::Flush() {
  stats_->flushes.Add();
  return WaitUntil([&] { return outstanding_tokens() == 0; });
}

}  // namespace ramferry::channels
