// Destination round sync: a channel that reads the SYNC of round k parks
// here until every channel has read its SYNC of round k. Only then may any
// channel apply a round k+1 page, so a page re-sent in round k+1 can never
// be overwritten by its stale round-k copy arriving late on another channel.
#ifndef RAMFERRY_ENGINE_ROUND_BARRIER_H_
#define RAMFERRY_ENGINE_ROUND_BARRIER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include "absl/status/status.h"

namespace ramferry::engine {

class RoundBarrier {
 public:
  // `on_round_done(round, pages)` runs on the last channel to arrive,
  // before the others are released; an error from it aborts the barrier.
  RoundBarrier(uint32_t parties,
               std::function<absl::Status(uint64_t, uint64_t)> on_round_done);

  // Arrives for `round` having applied `pages` pages in it. Returns once
  // all parties arrived; ABORTED if the barrier was aborted meanwhile.
  absl::Status Arrive(uint64_t round, uint64_t pages);
  void Abort();
  uint64_t completed_rounds() const;

 private:
  const uint32_t parties_;
  const std::function<absl::Status(uint64_t, uint64_t)> on_round_done_;
  mutable std::mutex mu_;
  std::condition_variable released_;
  // Guarded by mu_.
  uint32_t arrived_ = 0;
  uint64_t pages_ = 0;
  uint64_t completed_ = 0;  // rounds released
  bool aborted_ = false;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_ROUND_BARRIER_H_
