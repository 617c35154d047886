// The fault-latency histogram: bucket edges, percentiles, totals and the
// JSON export from known inputs; merges; exact counts under concurrent
// adds.
#include "engine/postcopy/fault_latency.h"

#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ramferry::engine {
namespace {

TEST(FaultLatencyTest, BucketEdges) {
  EXPECT_EQ(FaultLatencyBucket(0), 0u);
  EXPECT_EQ(FaultLatencyBucket(1), 1u);
  EXPECT_EQ(FaultLatencyBucket(2), 2u);
  EXPECT_EQ(FaultLatencyBucket(3), 2u);
  EXPECT_EQ(FaultLatencyBucket(4), 3u);
  EXPECT_EQ(FaultLatencyBucket(1023), 10u);
  EXPECT_EQ(FaultLatencyBucket(1024), 11u);
  EXPECT_EQ(FaultLatencyBucket(std::numeric_limits<uint64_t>::max()),
            kFaultLatencyBuckets - 1);
  for (size_t b = 0; b + 1 < kFaultLatencyBuckets; ++b) {
    EXPECT_EQ(FaultLatencyBucket(FaultLatencyBucketLowerMicros(b)), b);
    EXPECT_EQ(FaultLatencyBucket(FaultLatencyBucketUpperMicros(b) - 1), b);
    EXPECT_EQ(FaultLatencyBucketUpperMicros(b),
              FaultLatencyBucketLowerMicros(b + 1));
  }
  EXPECT_EQ(FaultLatencyBucketUpperMicros(kFaultLatencyBuckets - 1),
            std::numeric_limits<uint64_t>::max());
}

TEST(FaultLatencyTest, EmptyHistogramReportsZeros) {
  FaultLatencySnapshot s = FaultLatencyHistogram().Snapshot();
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.p50_us(), 0u);
  EXPECT_EQ(s.p99_us(), 0u);
  EXPECT_EQ(s.max_us(), 0u);
}

// 50 faults of 3 us, 49 of 100 us, one of 5 ms.
void AddKnown(FaultLatencyHistogram& h) {
  for (int i = 0; i < 50; ++i) h.Add(absl::Microseconds(3));
  for (int i = 0; i < 49; ++i) h.Add(uint64_t{100'000});
  h.Add(absl::Milliseconds(5));
}

TEST(FaultLatencyTest, KnownInputs) {
  FaultLatencyHistogram h;
  AddKnown(h);
  FaultLatencySnapshot s = h.Snapshot();
  EXPECT_EQ(s.count, 100u);
  EXPECT_EQ(s.buckets[2], 50u);               // [2, 4) us
  EXPECT_EQ(s.buckets[7], 49u);               // [64, 128) us
  EXPECT_EQ(s.buckets[13], 1u);               // [4096, 8192) us
  EXPECT_EQ(s.p50_us(), 4u);                  // the 50th fault is in [2, 4)
  EXPECT_EQ(s.p99_us(), 128u);                // the 99th in [64, 128)
  EXPECT_EQ(s.PercentileMicros(1.0), 5000u);  // bucket bound 8192, max 5000
  EXPECT_EQ(s.max_us(), 5000u);
  EXPECT_EQ(s.total_ns, 50u * 3000 + 49u * 100'000 + 5'000'000);
  EXPECT_EQ(s.total_blocked_us(), 10'050u);
}

TEST(FaultLatencyTest, SubMicrosecondFaultsCountAndRoundUp) {
  FaultLatencyHistogram h;
  h.Add(uint64_t{1});
  h.Add(uint64_t{999});
  FaultLatencySnapshot s = h.Snapshot();
  EXPECT_EQ(s.buckets[0], 2u);
  EXPECT_EQ(s.p50_us(), 1u);
  EXPECT_EQ(s.max_us(), 1u);
  EXPECT_EQ(s.total_blocked_us(), 1u);
  // A negative duration (a clock that went back) counts as zero.
  h.Add(absl::Microseconds(-5));
  EXPECT_EQ(h.Snapshot().buckets[0], 3u);
}

TEST(FaultLatencyTest, MergeAddsCountsAndKeepsTheLargestMax) {
  FaultLatencyHistogram a;
  AddKnown(a);
  FaultLatencyHistogram b;
  b.Add(absl::Milliseconds(20));
  b.Add(absl::Microseconds(3));
  FaultLatencySnapshot sb = b.Snapshot();

  FaultLatencySnapshot merged = a.Snapshot();
  merged.Merge(sb);
  EXPECT_EQ(merged.count, 102u);
  EXPECT_EQ(merged.buckets[2], 51u);
  EXPECT_EQ(merged.max_us(), 20'000u);
  EXPECT_EQ(merged.total_blocked_us(), 10'050u + 20'003);

  a.Merge(sb);  // the same into the live histogram
  FaultLatencySnapshot live = a.Snapshot();
  EXPECT_EQ(live.buckets, merged.buckets);
  EXPECT_EQ(live.count, merged.count);
  EXPECT_EQ(live.total_ns, merged.total_ns);
  EXPECT_EQ(live.max_ns, merged.max_ns);
}

TEST(FaultLatencyTest, JsonHasEveryBucketAsAnArray) {
  FaultLatencyHistogram h;
  h.Add(absl::Microseconds(3));
  h.Add(absl::Microseconds(3));
  EXPECT_EQ(h.Snapshot().ToJson(),
            "{\"count\":2,\"p50_us\":3,\"p99_us\":3,\"max_us\":3,"
            "\"total_blocked_us\":6,\"buckets\":[0,0,2,0,0,0,0,0,0,0,0,0,0,0,"
            "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}");
}

TEST(FaultLatencyTest, ConcurrentAddsAreAllCounted) {
  FaultLatencyHistogram h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (uint64_t i = 0; i < 10000; ++i) h.Add((t + 1) * 1000 * (i % 8));
    });
  }
  for (std::thread& t : threads) t.join();
  FaultLatencySnapshot s = h.Snapshot();
  EXPECT_EQ(s.count, 40000u);
  // Per thread: 1250 rounds of 0..7 us times (t + 1).
  EXPECT_EQ(s.total_ns, (1u + 2 + 3 + 4) * 1000u * 28 * 1250);
  EXPECT_EQ(s.max_ns, 4u * 7000);
}

}  // namespace
}  // namespace ramferry::engine
