// The per-channel SPSC command ring between the scheduler (producer) and a
// channel thread (consumer), with ordered barriers riding the ring.
//
// head and tail are free-running u32 counters: occupancy is head - tail
// (mod 2^32) and the slot is counter & (entries - 1). With a power-of-two
// ring, 2^32 is a multiple of the size, so indexing stays continuous across
// the counter wrap. Barrier sequence numbers are free-running too and
// compared by signed distance; 0 is reserved for "not a barrier" and
// skipped on wrap.
//
// The steady state is lock-free. A side that must sleep (producer on a full
// ring or awaiting a barrier, consumer on an empty ring) announces it in a
// *_waiting flag before its final check; the other side reads the flag
// after publishing. Both use seq_cst, so either the sleeper sees the new
// counter or the waker sees the flag and signals under the mutex: no lost
// wake-up. Abort is a sticky atomic that wakes both sides; it is the one
// cross-thread error flag (no plain bool is shared between the threads).
#ifndef RAMFERRY_ENGINE_COMMAND_RING_H_
#define RAMFERRY_ENGINE_COMMAND_RING_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/time/time.h"
#include "base/counters.h"

namespace ramferry::engine {

enum class CommandType : uint8_t {
  kWrite,   // send `page_count` pages of region `region` as one packet
  kSync,    // round barrier: flush completions, send SYNC, complete seq
  kFinish,  // end of stream: flush, send FINISH, complete seq, stop
  // `page_count` words of `offsets` are (offset, length) byte ranges of
  // region `region` that read as zero: one ZERO_RANGES packet.
  kZeroRanges,
  // A carried stream's bytes, `page_count` of them at `bytes`, at offset
  // `round` of stream `region` (proto/stream.h): one STREAM packet; and
  // its end, at `round` = its length: STREAM_END. `stream` is told once
  // they went.
  kStream,
  kStreamEnd,
};

class CarriedStream;

struct Command {
  CommandType type = CommandType::kWrite;
  uint32_t region = 0;  // index into the session's region list
  uint32_t page_count = 0;
  uint32_t barrier_seq = 0;  // 0 for kWrite
  uint64_t round = 0;
  uint64_t* offsets = nullptr;      // ring-owned, room for max_pages entries
  const uint8_t* bytes = nullptr;   // kStream
  CarriedStream* stream = nullptr;  // kStream, kStreamEnd
};

class CommandRing {
 public:
  // `entries` is a power of two. `first_seq` starts both counters there
  // (tests use it to cross the 2^32 wrap quickly).
  CommandRing(uint32_t entries, uint32_t max_pages, uint32_t first_seq = 0);

  uint32_t entries() const { return mask_ + 1; }
  uint32_t max_pages() const { return max_pages_; }

  // ---- producer ----
  // The next free slot, waiting while the ring is full; nullptr once
  // aborted. Fill it, then CommitPush().
  Command* BeginPush();
  void CommitPush();
  // Pushes a SYNC or FINISH for `round`; returns its sequence number, or 0
  // if the ring was aborted.
  uint32_t PushBarrier(CommandType type, uint64_t round);
  // Waits until the consumer completed barrier `seq`; false if aborted.
  bool WaitBarrier(uint32_t seq);
  // Pages queued and not yet released by the consumer.
  uint64_t backlog_pages() const {
    return pushed_pages_ - released_pages_.load(std::memory_order_acquire);
  }

  // ---- consumer ----
  // How many commands are ready, at most `max`; never waits.
  uint32_t Peek(uint32_t max) const;
  // The i-th ready command (i below what Peek returned).
  const Command& At(uint32_t i) const {
    return slots_[(tail_.load(std::memory_order_relaxed) + i) & mask_];
  }
  // Done with the first `n` ready commands: their slots may be reused.
  // One publication per batch, however many commands it covers.
  void Release(uint32_t n);
  void CompleteBarrier(uint32_t seq);
  // Sleeps until there is a command, the ring is aborted or `at_most`
  // passed; false if aborted.
  bool WaitForWork(absl::Duration at_most = absl::InfiniteDuration());

  // ---- either side, any thread ----
  void Abort();
  bool aborted() const { return aborted_.load(std::memory_order_seq_cst); }

  // Statistics, each written by one side.
  uint64_t max_occupancy() const { return max_occupancy_.get(); }
  uint64_t producer_wait_ns() const { return producer_wait_ns_.get(); }
  uint64_t producer_wait_max_ns() const { return producer_wait_max_ns_.get(); }
  uint64_t consumer_idle_max_ns() const { return consumer_idle_max_ns_.get(); }

 private:
  bool Full() const {
    return head_.load(std::memory_order_relaxed) -
               tail_.load(std::memory_order_seq_cst) >
           mask_;
  }
  bool Empty() const {
    return head_.load(std::memory_order_seq_cst) ==
           tail_.load(std::memory_order_relaxed);
  }
  void WakeProducer();
  // Blocks the producer until `ready()` or abort.
  template <typename Pred>
  void ProducerWait(Pred ready);

  const uint32_t mask_;
  const uint32_t max_pages_;
  std::vector<Command> slots_;
  std::unique_ptr<uint64_t[]> offsets_;

  std::atomic<uint32_t> head_;      // written by the producer only
  std::atomic<uint32_t> tail_;      // written by the consumer only
  uint32_t next_seq_;               // producer only
  std::atomic<uint32_t> done_seq_;  // consumer writes, producer reads
  uint64_t pushed_pages_ = 0;       // producer only
  std::atomic<uint64_t> released_pages_{0};

  std::atomic<bool> aborted_{false};
  std::atomic<bool> producer_waiting_{false};
  std::atomic<bool> consumer_waiting_{false};
  std::mutex mu_;  // only for sleeping and waking
  std::condition_variable producer_cv_;
  std::condition_variable consumer_cv_;

  base::Counter max_occupancy_, producer_wait_ns_, producer_wait_max_ns_,
      consumer_idle_max_ns_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_COMMAND_RING_H_
