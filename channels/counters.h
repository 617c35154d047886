// Counters written by one thread and read by any: a relaxed load + store
// instead of a locked read-modify-write, since only the owner writes.
#ifndef RAMFERRY_CHANNELS_COUNTERS_H_
#define RAMFERRY_CHANNELS_COUNTERS_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ramferry::channels {

class Counter {
 public:
  void Add(uint64_t n = 1) {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void RaiseTo(uint64_t n) {
    if (n > v_.load(std::memory_order_relaxed)) {
      v_.store(n, std::memory_order_relaxed);
    }
  }
  uint64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

// Monotonic nanoseconds, for timing waits into counters.
inline uint64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_COUNTERS_H_
