// The counter table (ramferry/channel_counters.h) makes Total() and the
// channel JSON: every counter merges as its row says and appears under the
// key it always had.
#include "tools/common/stats_json.h"

#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ramferry::cli {
namespace {

TEST(ChannelCounters, TotalSumsOrKeepsTheLargestAsEachRowSays) {
  SessionStats s;
  s.channels.resize(2);
  for (const ChannelCounter& k : kChannelCounters) {
    s.channels[0].*k.field = 3;
    s.channels[1].*k.field = 5;
  }
  const ChannelStats t = s.Total();
  for (const ChannelCounter& k : kChannelCounters) {
    EXPECT_EQ(t.*k.field, k.merge == CounterMerge::kSum ? 8u : 5u) << k.name;
  }
}

TEST(ChannelCounters, JsonKeysAreTheOnesTheToolsRead) {
  ChannelStats c;
  c.channel = 7;
  for (const ChannelCounter& k : kChannelCounters) c.*k.field = 2000000000;
  const nlohmann::json j = nlohmann::json::parse(DumpJson(ChannelStatsJson(c)));
  std::set<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.insert(key);
  // The keys of the channel JSON before the table, and
  // producer_wait_max_s, which only ramferry-bench wrote then.
  const std::set<std::string> want = {
      "channel",
      "packets",
      "pages",
      "payload_bytes",
      "header_bytes",
      "zero_pages",
      "untouched_pages",
      "zero_range_packets",
      "zero_pages_written",
      "compressed_packets",
      "compressed_input_bytes",
      "compressed_output_bytes",
      "compress_s",
      "syncs",
      "finishes",
      "send_calls",
      "submit_calls",
      "short_sends",
      "zc_sends",
      "zc_completions",
      "zc_copied",
      "zc_notifications",
      "enobufs_retries",
      "flushes",
      "completion_wait_s",
      "max_slots_in_flight",
      "ring_max_occupancy",
      "producer_wait_s",
      "producer_wait_max_s",
      "consumer_idle_max_s",
      "rdma_posts",
      "rdma_wrs",
      "rdma_outstanding_max",
      "rdma_sq_full_hits",
      "rdma_drains_to_zero",
      "inline_sends",
      "inline_max_bytes",
      "inline_granted",
      "register_round_trips",
      "register_batch_max",
      "chunks_registered",
      "rdma_registered_bytes",
      "rdma_register_s",
      "chunks_compressed",
      "rdma_credit_waits",
      "rdma_credit_returns",
      "delta_pages",
      "delta_record_bytes",
      "delta_s",
      "delta_cache_hits",
      "delta_cache_misses",
      "delta_cache_evictions",
      "sealed_bytes",
      "sealed_in_place_bytes",
      "file_bytes",
      "seal_s",
      "send_latency_p50_us",
      "send_latency_p99_us",
      "thread_cpu_s",
      "recv_calls",
      "lost",
  };
  EXPECT_EQ(keys, want);
  EXPECT_EQ(j["channel"], 7);
  EXPECT_EQ(j["zc_copied"], 2000000000u);
  EXPECT_DOUBLE_EQ(j["completion_wait_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["send_latency_p99_us"].get<double>(), 2e6);
}

TEST(ChannelCounters, AChannelWithAnEndpointSaysWhere) {
  ChannelStats c;
  c.channel = 3;
  c.endpoint = "10.77.1.2:7070";
  const Json j = ChannelStatsJson(c);
  EXPECT_EQ(j["endpoint"], "10.77.1.2:7070");
  EXPECT_EQ(j.begin().key(), "channel");
  EXPECT_EQ(std::next(j.begin()).key(), "endpoint");
}

TEST(ChannelCounters, ARenameReplacesOnlyItsKey) {
  ChannelStats c;
  c.thread_cpu_ns = 1500000000;
  Json j;
  constexpr CounterRename kRenames[] = {
      {&ChannelStats::thread_cpu_ns, "channel_threads_cpu_s"}};
  AddCounterFields(j, c, kRenames);
  EXPECT_FALSE(j.contains("thread_cpu_s"));
  EXPECT_DOUBLE_EQ(j["channel_threads_cpu_s"].get<double>(), 1.5);
  EXPECT_EQ(j.size(), std::size(kChannelCounters));
}

TEST(PostcopyStatsJson, BucketsArePowersOfTwoMicroseconds) {
  EXPECT_EQ(LatencyBucketBounds(0), std::make_pair(uint64_t{0}, uint64_t{1}));
  EXPECT_EQ(LatencyBucketBounds(1), std::make_pair(uint64_t{1}, uint64_t{2}));
  EXPECT_EQ(LatencyBucketBounds(2), std::make_pair(uint64_t{2}, uint64_t{4}));
  EXPECT_EQ(LatencyBucketBounds(11),
            std::make_pair(uint64_t{1024}, uint64_t{2048}));
}

TEST(PostcopyStatsJson, EveryCounterAndTheNonEmptyBuckets) {
  PostcopyStats p;
  p.started = true;
  p.urgent_channel = true;
  p.missing_pages = 1000;
  p.requested_pages = 40;
  p.urgent_pages = 38;
  p.pushed_pages = 962;
  p.duplicate_pages = 3;
  p.fault_messages = 45;
  p.local_zero_faults = 2;
  p.switch_ns = 1'500'000;
  p.duration_ns = 2'000'000'000;
  p.resumes = 1;
  p.latency_buckets = {0, 0, 0, 0, 0, 0, 0, 10, 25, 0, 5};
  p.faults = 40;
  p.latency_p50_us = 256;
  p.latency_p99_us = 1024;
  p.latency_max_us = 700;
  p.blocked_us = 12'000;
  const nlohmann::json j =
      nlohmann::json::parse(DumpJson(PostcopyStatsJson(p)));
  EXPECT_EQ(j["started"], true);
  EXPECT_EQ(j["urgent_channel"], true);
  EXPECT_EQ(j["missing_pages"], 1000);
  EXPECT_EQ(j["requested_pages"], 40);
  EXPECT_EQ(j["urgent_pages"], 38);
  EXPECT_EQ(j["pushed_pages"], 962);
  EXPECT_EQ(j["duplicate_pages"], 3);
  EXPECT_EQ(j["fault_messages"], 45);
  EXPECT_EQ(j["local_zero_faults"], 2);
  EXPECT_EQ(j["faults"], 40);
  EXPECT_DOUBLE_EQ(j["switch_s"].get<double>(), 0.0015);
  EXPECT_DOUBLE_EQ(j["duration_s"].get<double>(), 2.0);
  EXPECT_EQ(j["resumes"], 1);
  EXPECT_EQ(j["latency_p50_us"], 256);
  EXPECT_EQ(j["latency_p99_us"], 1024);
  EXPECT_EQ(j["latency_max_us"], 700);
  EXPECT_DOUBLE_EQ(j["blocked_s"].get<double>(), 0.012);
  EXPECT_EQ(j["latency_buckets"].size(), 11u);
  const nlohmann::json want =
      nlohmann::json::parse(R"([{"lo_us":64,"hi_us":128,"count":10},)"
                            R"({"lo_us":128,"hi_us":256,"count":25},)"
                            R"({"lo_us":512,"hi_us":1024,"count":5}])");
  EXPECT_EQ(j["latency_histogram"], want);
}

}  // namespace
}  // namespace ramferry::cli
