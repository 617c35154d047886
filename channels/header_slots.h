// The rotating header array of a zero-copy channel: header and pages leave
// in ONE zero-copy send, so the header memory must survive until the
// kernel lets go of it; each packet takes the next slot.
//
// Sends are identified by completion tokens that the transport issues in
// increasing order (MSG_ZEROCOPY's per-socket counter, an io_uring
// user_data, an RDMA wr_id). A slot is busy while any token attached to it
// is outstanding; Acquire() never hands out a busy slot, whatever the
// policy. The policy only decides when else to wait:
//   wrap: wait for every completion when the array wraps (and at Flush);
//   slot: wait only for the slot about to be reused; reap opportunistically;
//   each: wait for each packet's completions right after sending it.
#ifndef RAMFERRY_CHANNELS_HEADER_SLOTS_H_
#define RAMFERRY_CHANNELS_HEADER_SLOTS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "channels/transport.h"

namespace ramferry::channels {

class HeaderSlots;

// Where completions come from: the transport's error queue or CQ.
class CompletionSource {
 public:
  virtual ~CompletionSource() = default;
  // Reports ready completions to `slots` (HeaderSlots::Complete). With
  // `block`, waits until at least one arrives, up to the stall timeout.
  virtual absl::Status Reap(HeaderSlots& slots, bool block) = 0;
};

class HeaderSlots {
 public:
  HeaderSlots(uint32_t slots, size_t slot_bytes, CompletionPolicy policy,
              CompletionSource* source, TransportStats* stats);

  uint32_t size() const { return slot_count_; }
  uint32_t current() const { return current_; }
  bool busy(uint32_t slot) const { return refs_[slot] != 0; }
  uint32_t busy_slots() const { return busy_slots_; }
  size_t outstanding_tokens() const { return pending_.size() - done_ahead_; }

  absl::Span<uint8_t> buffer(uint32_t slot) {
    return absl::Span<uint8_t>(buffers_.get() + size_t{slot} * slot_bytes_,
                               slot_bytes_);
  }

  // The current slot's buffer, once no send refers to it.
  absl::StatusOr<absl::Span<uint8_t>> Acquire();
  // A send call carrying the current slot was issued with `token`. Tokens
  // must be attached in increasing order (mod 2^32), none skipped.
  void Attach(uint32_t token) { Attach(token, current_); }
  // The same for an earlier slot (a resend of a packet's remainder).
  void Attach(uint32_t token, uint32_t slot);
  // The send with `token` completed. Fails for a token that is not
  // outstanding (never issued, or completed twice). `zero_copy` is false
  // for a send that pinned nothing (a copied send, or one that failed
  // before pinning): it frees its slot but is not counted as a zero-copy
  // completion.
  absl::Status Complete(uint32_t token, bool copied, bool zero_copy = true);
  // The packet in the current slot is out: move on, and wait as the policy
  // says.
  absl::Status PacketSent();
  // Waits for every outstanding token. Counted as a flush.
  absl::Status Flush();

 private:
  struct Pending {
    uint32_t slot;
    bool done;
  };
  // Reaps until `done()` holds, timing the wait into the stats.
  template <typename Pred>
  absl::Status WaitUntil(Pred done);

  const uint32_t slot_count_;
  const size_t slot_bytes_;
  const CompletionPolicy policy_;
  CompletionSource* const source_;
  TransportStats* const stats_;
  std::unique_ptr<uint8_t[]> buffers_;
  std::vector<uint32_t> refs_;  // outstanding tokens per slot
  uint32_t busy_slots_ = 0;
  uint32_t current_ = 0;
  // Outstanding tokens in issue order; pending_[i] is token base_token_+i.
  std::deque<Pending> pending_;
  uint32_t base_token_ = 0;
  size_t done_ahead_ = 0;  // completed entries not yet popped from the front
};

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_HEADER_SLOTS_H_
