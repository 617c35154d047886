// Ordered sends on one stream socket through an asynchronous submission
// queue (io_uring): sends are submitted as linked chains, at most one chain
// in flight, so the stream never reorders. A send that completes short, or
// is cancelled because an earlier link broke, or fails with a retryable
// error, goes out again for what it did not carry, ahead of everything
// queued since.
//
// Knows nothing of io_uring: the transport turns each Send of a started
// chain into a submission (tagged with UserData) and reports each send
// completion here. Every send holds a token on its header slot; a send
// whose completion says no notification will follow releases it at once.
//
// A send refused for ENOBUFS (the kernel could not pin more pages) goes
// again only once room is freed: until the transport reports a
// notification (RoomFreed), the chain is starved and must not be started,
// or the resubmission would be refused again at once, in a loop.
#ifndef RAMFERRY_CHANNELS_SEND_CHAIN_H_
#define RAMFERRY_CHANNELS_SEND_CHAIN_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "channels/header_slots.h"
#include "channels/transport.h"

namespace ramferry::channels {

class SendChain {
 public:
  struct Send {
    uint32_t slot = 0;             // header slot whose memory it carries
    uint8_t kind = 0;              // the transport's own tag
    bool zero_copy = false;        // pins pages: a notification may follow
    uint16_t buf_index = 0;        // transport-defined (registered buffer)
    const uint8_t* buf = nullptr;  // transport-defined (contiguous sends)
    uint32_t part = 0;             // transport-defined (a packet's n-th send)
    uint64_t total = 0;            // bytes the send carries in all
    uint64_t offset = 0;  // bytes already delivered by earlier attempts
    uint32_t token = 0;   // assigned by Queue/resend
  };

  // Tokens go to `slots`; counters to `stats`. A chain holds at most
  // `max_chain` sends (the submission queue's size).
  SendChain(HeaderSlots* slots, TransportStats* stats, size_t max_chain);

  // Queues a send (assigning and attaching its token).
  void Queue(Send send);
  bool has_queued() const { return !queued_.empty(); }
  bool in_flight() const { return pending_ > 0; }
  // A send was refused for ENOBUFS since the last RoomFreed().
  bool starved() const { return starved_; }
  // A zero-copy notification arrived: pinned pages were let go.
  void RoomFreed() { starved_ = false; }

  // Starts the next chain (none may be in flight): up to max_chain queued
  // sends, in order, to submit linked. Valid until the chain completes.
  absl::Span<const Send> Start();
  // The submission tag for the i-th send of the started chain.
  uint64_t UserData(size_t i) const;
  static uint32_t TokenOf(uint64_t user_data) {
    return static_cast<uint32_t>(user_data);
  }

  // A send completion: `result` bytes or -errno; `notification_follows`
  // when the kernel will report the pinned pages' release separately.
  // Errors that are not retryable come back, naming the errno.
  absl::Status OnCompletion(uint64_t user_data, int32_t result,
                            bool notification_follows);

 private:
  struct InFlight {
    Send send;
    uint64_t delivered = 0;  // this attempt
    bool completed = false;
  };
  void RequeueUnfinished();

  HeaderSlots* const slots_;
  TransportStats* const stats_;
  const size_t max_chain_;
  std::deque<Send> queued_;
  std::vector<InFlight> chain_;
  std::vector<Send> started_;  // the view Start() returns
  size_t pending_ = 0;         // completions still due for the chain
  uint32_t next_token_ = 0;
  bool starved_ = false;
};

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_SEND_CHAIN_H_
