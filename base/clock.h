// The library's clocks, in integer nanoseconds: one monotonic clock for
// every wait, deadline and latency it measures, and the calling thread's
// CPU time.
#ifndef RAMFERRY_BASE_CLOCK_H_
#define RAMFERRY_BASE_CLOCK_H_

#include <time.h>

#include <chrono>
#include <cstdint>

namespace ramferry::base {

// CPU time of the calling thread, in nanoseconds.
inline uint64_t ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Monotonic nanoseconds (steady_clock, which is CLOCK_MONOTONIC here).
inline uint64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace ramferry::base

#endif  // RAMFERRY_BASE_CLOCK_H_
