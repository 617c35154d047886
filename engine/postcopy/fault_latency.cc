#include "engine/postcopy/fault_latency.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ramferry::engine {

size_t FaultLatencyBucket(uint64_t micros) {
  // 0 -> 0; [2^(k-1), 2^k) -> k.
  return std::min<size_t>(std::bit_width(micros), kFaultLatencyBuckets - 1);
}

uint64_t FaultLatencyBucketLowerMicros(size_t b) {
  return b == 0 ? 0 : uint64_t{1} << (b - 1);
}

uint64_t FaultLatencyBucketUpperMicros(size_t b) {
  if (b >= kFaultLatencyBuckets - 1) {
    return std::numeric_limits<uint64_t>::max();
  }
  return uint64_t{1} << b;
}

uint64_t FaultLatencySnapshot::PercentileMicros(double q) const {
  if (count == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  // The rank of the fault that marks the percentile, 1-based.
  const uint64_t rank = std::max<uint64_t>(
      1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(count))));
  uint64_t seen = 0;
  for (size_t b = 0; b < kFaultLatencyBuckets; ++b) {
    seen += buckets[b];
    if (seen >= rank) {
      return std::min(FaultLatencyBucketUpperMicros(b), max_us());
    }
  }
  return max_us();
}

void FaultLatencySnapshot::Merge(const FaultLatencySnapshot& other) {
  for (size_t b = 0; b < kFaultLatencyBuckets; ++b) {
    buckets[b] += other.buckets[b];
  }
  count += other.count;
  total_ns += other.total_ns;
  max_ns = std::max(max_ns, other.max_ns);
}

std::string FaultLatencySnapshot::ToJson() const {
  return absl::StrCat("{\"count\":", count, ",\"p50_us\":", p50_us(),
                      ",\"p99_us\":", p99_us(), ",\"max_us\":", max_us(),
                      ",\"total_blocked_us\":", total_blocked_us(),
                      ",\"buckets\":[", absl::StrJoin(buckets, ","), "]}");
}

void FaultLatencyHistogram::Add(uint64_t nanos) {
  buckets_[FaultLatencyBucket(nanos / 1000)].fetch_add(
      1, std::memory_order_relaxed);
  total_ns_.fetch_add(nanos, std::memory_order_relaxed);
  RaiseMax(nanos);
}

void FaultLatencyHistogram::Add(absl::Duration latency) {
  Add(static_cast<uint64_t>(
      std::max<int64_t>(0, absl::ToInt64Nanoseconds(latency))));
}

void FaultLatencyHistogram::Merge(const FaultLatencySnapshot& other) {
  for (size_t b = 0; b < kFaultLatencyBuckets; ++b) {
    if (other.buckets[b] != 0) {
      buckets_[b].fetch_add(other.buckets[b], std::memory_order_relaxed);
    }
  }
  total_ns_.fetch_add(other.total_ns, std::memory_order_relaxed);
  RaiseMax(other.max_ns);
}

FaultLatencySnapshot FaultLatencyHistogram::Snapshot() const {
  FaultLatencySnapshot s;
  for (size_t b = 0; b < kFaultLatencyBuckets; ++b) {
    s.buckets[b] = buckets_[b].load(std::memory_order_relaxed);
    s.count += s.buckets[b];
  }
  s.total_ns = total_ns_.load(std::memory_order_relaxed);
  s.max_ns = max_ns_.load(std::memory_order_relaxed);
  return s;
}

void FaultLatencyHistogram::RaiseMax(uint64_t nanos) {
  uint64_t seen = max_ns_.load(std::memory_order_relaxed);
  while (seen < nanos && !max_ns_.compare_exchange_weak(
                             seen, nanos, std::memory_order_relaxed)) {
  }
}

}  // namespace ramferry::engine
