// Counters written by one thread and read by any: a relaxed load + store
// instead of a locked read-modify-write, since only the owner writes.
#ifndef RAMFERRY_BASE_COUNTERS_H_
#define RAMFERRY_BASE_COUNTERS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace ramferry::base {

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

// Latencies in log-spaced buckets (4 per power of two, so within 19% of
// the true value), written by one thread and read by any.
class LatencyHistogram {
 public:
  void Record(uint64_t ns) { buckets_[Bucket(ns)].Add(); }
  uint64_t count() const {
    uint64_t n = 0;
    for (const Counter& b : buckets_) n += b.get();
    return n;
  }
  // The upper bound of the bucket holding quantile q in (0, 1]; 0 if empty.
  uint64_t Quantile(double q) const {
    const uint64_t n = count();
    if (n == 0) return 0;
    const uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(n));
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += buckets_[i].get();
      if (seen > rank || seen == n) return UpperBound(i);
    }
    return UpperBound(kBuckets - 1);
  }

 private:
  static constexpr int kSub = 4;
  static constexpr int kBuckets = 64 * kSub;
  static int Bucket(uint64_t ns) {
    if (ns < kSub) return static_cast<int>(ns);
    const int exp = 63 - __builtin_clzll(ns);  // ns in [2^exp, 2^(exp+1))
    const int sub = static_cast<int>((ns >> (exp - 2)) & (kSub - 1));
    return std::min(kBuckets - 1, exp * kSub + sub);
  }
  static uint64_t UpperBound(int bucket) {
    if (bucket < kSub) return static_cast<uint64_t>(bucket);
    const int exp = bucket / kSub;
    const uint64_t sub = bucket % kSub;
    return (uint64_t{1} << exp) + ((sub + 1) << (exp - 2));
  }
  Counter buckets_[kBuckets];
};

}  // namespace ramferry::base

#endif  // RAMFERRY_BASE_COUNTERS_H_
