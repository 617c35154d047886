#include "tools/common/stats_json.h"

#include <algorithm>
#include <iterator>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "tools/common/cli.h"

namespace ramferry::cli {

namespace {

// A time counter holds nanoseconds and says so in its name, which
// CounterKey() replaces.
constexpr bool NamedForItsUnit(const ChannelCounter& c) {
  return std::string_view(c.name).ends_with("_ns") ==
         (c.json != CounterJson::kCount);
}
static_assert(std::all_of(std::begin(kChannelCounters),
                          std::end(kChannelCounters), NamedForItsUnit));

}  // namespace

std::string CounterKey(const ChannelCounter& counter) {
  absl::string_view name = counter.name;
  switch (counter.json) {
    case CounterJson::kCount:
      return std::string(name);
    case CounterJson::kSeconds:
      return absl::StrCat(absl::StripSuffix(name, "_ns"), "_s");
    case CounterJson::kMicros:
      return absl::StrCat(absl::StripSuffix(name, "_ns"), "_us");
  }
  return std::string(name);
}

void AddCounterFields(Json& j, const ChannelStats& c,
                      absl::Span<const CounterRename> renames) {
  for (const ChannelCounter& counter : kChannelCounters) {
    const auto renamed = std::find_if(
        renames.begin(), renames.end(),
        [&](const CounterRename& r) { return r.field == counter.field; });
    const std::string key = renamed != renames.end() ? std::string(renamed->key)
                                                     : CounterKey(counter);
    const uint64_t v = c.*counter.field;
    switch (counter.json) {
      case CounterJson::kCount:
        j[key] = v;
        break;
      case CounterJson::kSeconds:
        j[key] = v * 1e-9;
        break;
      case CounterJson::kMicros:
        j[key] = v * 1e-3;
        break;
    }
  }
}

Json ChannelStatsJson(const ChannelStats& c) {
  Json j = {{"channel", c.channel}};
  if (!c.endpoint.empty()) j["endpoint"] = c.endpoint;
  AddCounterFields(j, c);
  return j;
}

Json ChannelArrayJson(const SessionStats& s) {
  Json a = Json::array();
  for (const ChannelStats& c : s.channels) a.push_back(ChannelStatsJson(c));
  return a;
}

Json StreamArrayJson(const SessionStats& s) {
  Json a = Json::array();
  for (const StreamStats& t : s.streams) {
    a.push_back({{"stream", t.stream},
                 {"channel", t.channel},
                 {"forward_bytes", t.forward_bytes},
                 {"sent_bytes", t.sent_bytes},
                 {"back_bytes", t.back_bytes},
                 {"forward_ended", t.forward_ended},
                 {"back_ended", t.back_ended}});
  }
  return a;
}

Json ChannelLossesJson(const SessionStats& s) {
  Json a = Json::array();
  for (const ChannelLoss& l : s.channels_lost) {
    a.push_back(
        {{"channel", l.channel}, {"round", l.round}, {"reason", l.reason}});
  }
  return a;
}

std::pair<uint64_t, uint64_t> LatencyBucketBounds(size_t k) {
  if (k == 0) return {0, 1};
  return {uint64_t{1} << (k - 1), uint64_t{1} << k};
}

Json PostcopyStatsJson(const PostcopyStats& p) {
  Json histogram = Json::array();
  for (size_t k = 0; k < p.latency_buckets.size(); ++k) {
    if (p.latency_buckets[k] == 0) continue;
    const auto [lo, hi] = LatencyBucketBounds(k);
    histogram.push_back(
        {{"lo_us", lo}, {"hi_us", hi}, {"count", p.latency_buckets[k]}});
  }
  return {{"started", p.started},
          {"urgent_channel", p.urgent_channel},
          {"missing_pages", p.missing_pages},
          {"requested_pages", p.requested_pages},
          {"urgent_pages", p.urgent_pages},
          {"pushed_pages", p.pushed_pages},
          {"duplicate_pages", p.duplicate_pages},
          {"fault_messages", p.fault_messages},
          {"local_zero_faults", p.local_zero_faults},
          {"faults", p.faults},
          {"switch_s", p.switch_ns * 1e-9},
          {"duration_s", p.duration_ns * 1e-9},
          {"resumes", p.resumes},
          {"latency_p50_us", p.latency_p50_us},
          {"latency_p99_us", p.latency_p99_us},
          {"latency_max_us", p.latency_max_us},
          {"blocked_s", p.blocked_us * 1e-6},
          {"latency_buckets", p.latency_buckets},
          {"latency_histogram", std::move(histogram)}};
}

Json DeltaJson(const ChannelStats& t, uint32_t page_size) {
  Json j = Json::object();
  j["pages"] = t.delta_pages;
  j["record_bytes"] = t.delta_record_bytes;
  j["page_bytes"] = t.delta_pages * page_size;
  j["bytes_saved"] = t.delta_pages * page_size - t.delta_record_bytes;
  j["cache_hits"] = t.delta_cache_hits;
  j["cache_misses"] = t.delta_cache_misses;
  j["cache_evictions"] = t.delta_cache_evictions;
  j["delta_s"] = static_cast<double>(t.delta_ns) / 1e9;
  return j;
}

std::string DeltaLine(const ChannelStats& t, uint32_t page_size) {
  if (t.delta_pages == 0 && t.delta_cache_misses == 0) return "not used";
  const uint64_t stood_for = t.delta_pages * page_size;
  return absl::StrFormat(
      "%d pages as deltas (%s for %s: %s saved); cache %d hits, %d misses, "
      "%d evictions",
      t.delta_pages, FormatBytes(t.delta_record_bytes), FormatBytes(stood_for),
      FormatBytes(stood_for - t.delta_record_bytes), t.delta_cache_hits,
      t.delta_cache_misses, t.delta_cache_evictions);
}

}  // namespace ramferry::cli
