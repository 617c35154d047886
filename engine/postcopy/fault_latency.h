// How long post-copy page faults kept threads blocked: a histogram in
// power-of-two microsecond buckets, like the one QEMU reports for its
// post-copy, so the two can be read side by side.
//
// Bucket 0 counts latencies under 1 us; bucket k (1 <= k < kBuckets - 1)
// counts [2^(k-1), 2^k) us; the last bucket counts everything from
// 2^(kBuckets-2) us (about 18 minutes) on. Percentiles come from the
// buckets, so they are reported as the upper bound of the bucket that
// holds them (clamped to the exact maximum): never below the true value,
// and less than twice it. The count, the total and the maximum are exact.
#ifndef RAMFERRY_ENGINE_POSTCOPY_FAULT_LATENCY_H_
#define RAMFERRY_ENGINE_POSTCOPY_FAULT_LATENCY_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace ramferry::engine {

inline constexpr size_t kFaultLatencyBuckets = 32;

// The bucket a latency of `micros` falls in.
size_t FaultLatencyBucket(uint64_t micros);
// The bounds of bucket `b` in us: [lower, upper); the last bucket's upper
// bound is UINT64_MAX.
uint64_t FaultLatencyBucketLowerMicros(size_t b);
uint64_t FaultLatencyBucketUpperMicros(size_t b);

// A histogram's values at one moment: plain data, to report, to export
// (ToJson) and to merge (several placers, several regions).
struct FaultLatencySnapshot {
  std::array<uint64_t, kFaultLatencyBuckets> buckets{};
  uint64_t count = 0;     // the sum of the buckets
  uint64_t total_ns = 0;  // time blocked, over every fault
  uint64_t max_ns = 0;

  // The latency under which a fraction `q` (0 < q <= 1) of the faults
  // fell, in us, as the upper bound of its bucket clamped to the maximum;
  // 0 without faults.
  uint64_t PercentileMicros(double q) const;
  uint64_t p50_us() const { return PercentileMicros(0.50); }
  uint64_t p99_us() const { return PercentileMicros(0.99); }
  // Rounded up, so a fault of 1 ns shows as 1 us, not as none.
  uint64_t max_us() const { return (max_ns + 999) / 1000; }
  uint64_t total_blocked_us() const { return (total_ns + 999) / 1000; }

  void Merge(const FaultLatencySnapshot& other);

  // {"count":N,"p50_us":..,"p99_us":..,"max_us":..,"total_blocked_us":..,
  //  "buckets":[b0,b1,...]}: every bucket, bucket k as described above.
  std::string ToJson() const;
};

// Thread-safe: Add from any number of threads at once, without a lock
// (atomic counters); Snapshot at any time, consistent per counter (a
// snapshot taken during adds may count a fault in `count` whose time is
// not yet in `total_ns`, or the reverse).
class FaultLatencyHistogram {
 public:
  void Add(uint64_t nanos);
  void Add(absl::Duration latency);
  // Adds every fault of `other` (another histogram's snapshot).
  void Merge(const FaultLatencySnapshot& other);
  FaultLatencySnapshot Snapshot() const;

 private:
  void RaiseMax(uint64_t nanos);

  std::array<std::atomic<uint64_t>, kFaultLatencyBuckets> buckets_{};
  std::atomic<uint64_t> total_ns_{0};
  std::atomic<uint64_t> max_ns_{0};
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_POSTCOPY_FAULT_LATENCY_H_
