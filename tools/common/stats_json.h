// Session counters as JSON, the same way in every binary.
#ifndef RAMFERRY_TOOLS_COMMON_STATS_JSON_H_
#define RAMFERRY_TOOLS_COMMON_STATS_JSON_H_

#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ramferry/stats.h"
#include "tools/common/json.h"

namespace ramferry::cli {

// A counter's JSON key: its name, with a time's _ns replaced by _s or
// _us (CounterJson).
std::string CounterKey(const ChannelCounter& counter);

// A key a JSON document gives a counter instead of CounterKey().
struct CounterRename {
  uint64_t ChannelStats::*field;
  absl::string_view key;
};

// Adds every counter of `c` to the object `j`, in the order of
// RAMFERRY_CHANNEL_COUNTERS; a time in its JSON unit.
void AddCounterFields(Json& j, const ChannelStats& c,
                      absl::Span<const CounterRename> renames = {});
// The counters of one channel (or a total): an object of its channel
// number, its endpoint where it has one, and AddCounterFields().
Json ChannelStatsJson(const ChannelStats& c);
// An array of per-channel objects.
Json ChannelArrayJson(const SessionStats& s);
// Each carried stream (SessionOptions::streams): its bytes each way, its
// channel, whether each direction ended.
Json StreamArrayJson(const SessionStats& s);
// The channels the session went on without, as an array of
// {channel, round, reason} (SessionOptions::survive_channel_loss).
Json ChannelLossesJson(const SessionStats& s);

// Delta encoding's summary (SessionOptions::delta), from a total: pages
// sent as records, their record bytes, the page bytes they stood for and
// what that saved; the source's cache hits, misses and evictions; the
// encoding time.
Json DeltaJson(const ChannelStats& total, uint32_t page_size);
// The same as one line: "N pages as deltas (X for Y: Z saved); cache H
// hits, M misses, E evictions", or "not used".
std::string DeltaLine(const ChannelStats& total, uint32_t page_size);

// Fault-latency bucket `k` of PostcopyStats::latency_buckets as
// [lo_us, hi_us): bucket 0 is [0, 1), bucket k [2^(k-1), 2^k).
std::pair<uint64_t, uint64_t> LatencyBucketBounds(size_t k);
// Post-copy's counters (either end): pages missing, requested, urgent,
// pushed, duplicates; faults and their latency (p50/p99/max, blocked
// time); the switch and the post-copy phase in seconds; resumes; the
// histogram's raw buckets and its non-empty ones as {lo_us, hi_us, count}.
Json PostcopyStatsJson(const PostcopyStats& p);

}  // namespace ramferry::cli

#endif  // RAMFERRY_TOOLS_COMMON_STATS_JSON_H_
