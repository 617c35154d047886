// rdma_credits: receive-credit accounting for SENDs on an RDMA channel
// (kFeatureRdmaCredits). A SEND consumes one receive the peer has posted;
// one that finds none is refused with an RNR NAK and retried by the
// hardware after a back-off, so a slow peer costs retries and a stuck one
// looks like a stall. With credits the sender knows how many receives the
// peer has posted and never sends beyond them.
//
// The destination grants its whole receive queue once (the first CREDITS),
// then returns receives in batches as it posts them again. No verbs here:
// both halves are plain counters, tested without an RDMA device.
//
// Only the source's SENDs are counted. The destination's own SENDs to the
// source (REGION_KEYS once, a REGISTER_RESULT per request the source waits
// for, a CREDITS per batch of the source's SENDs) are bounded by what the
// source sent, and the source posts each receive again as soon as it has
// read it: they stay far below its receive queue.
#ifndef RAMFERRY_CHANNELS_RDMA_CREDITS_H_
#define RAMFERRY_CHANNELS_RDMA_CREDITS_H_

#include <cstdint>

#include "absl/status/status.h"

namespace ramferry::channels {

// The sending side: SENDs the peer has a receive posted for.
// Invariant, once granted: available() + in_use() == window().
class SendCredits {
 public:
  // Without `counted` (the peer grants none) every SEND may go at once.
  explicit SendCredits(bool counted = false) : counted_(counted) {}

  bool counted() const { return counted_; }
  // Whether `sends` SENDs may be posted now: the first grant has come and
  // holds that many.
  bool CanSend(uint32_t sends) const {
    return !counted_ || sends == 0 || (window_ > 0 && available_ >= sends);
  }
  // Spends `sends` credits; CanSend(sends) must hold.
  void Take(uint32_t sends);
  // A CREDITS message: the first fixes the window (the peer's receive
  // queue); a later one returns receives. Returning more than are in use
  // is the peer's error.
  absl::Status Grant(uint32_t credits);

  uint32_t window() const { return window_; }
  uint32_t available() const { return available_; }
  uint32_t in_use() const { return window_ - available_; }

 private:
  bool counted_;
  uint32_t window_ = 0;
  uint32_t available_ = 0;
};

// The receiving side: receives posted again and not yet reported.
// Returning them in batches of `batch` keeps the CREDITS messages few; it
// cannot deadlock while batch <= the window: a sender with no credits has
// every receive in the receiver's hands, and once the receiver has read
// and posted them again they make at least one batch.
class CreditReturn {
 public:
  // `window`: the receives the first grant offers; batches of window / 8
  // (at least one).
  explicit CreditReturn(uint32_t window);

  uint32_t window() const { return window_; }
  uint32_t batch() const { return batch_; }
  // One receive posted again.
  void Reposted() { ++pending_; }
  // The credits to return now (a full batch or more), or 0.
  uint32_t TakeDue();
  uint32_t pending() const { return pending_; }

 private:
  const uint32_t window_;
  const uint32_t batch_;
  uint32_t pending_ = 0;
};

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_RDMA_CREDITS_H_
