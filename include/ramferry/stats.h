// Counters a session exposes. Each is read without stopping the channels;
// a snapshot is consistent per counter, not across counters.
#ifndef RAMFERRY_STATS_H_
#define RAMFERRY_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ramferry/channel_counters.h"

namespace ramferry {

// How SessionStats::Total() combines a counter across channels, and how
// the JSON reports it (see ramferry/channel_counters.h).
enum class CounterMerge { kSum, kMax };
enum class CounterJson { kCount, kSeconds, kMicros };

struct ChannelStats {
  uint32_t channel = 0;
  // Where the channel's connection went: on the source the address it
  // dialled (SessionOptions::channel_endpoints, or host:port), on the
  // destination the local address it arrived on; "host:port". Empty in a
  // Total(), and for a transport without an IP address of its own.
  std::string endpoint;
  // A uint64_t, 0 to begin with, for each row of RAMFERRY_CHANNEL_COUNTERS
  // in ramferry/channel_counters.h, which says what each one counts.
#define RAMFERRY_STATS_FIELD(field, merge, json, doc) uint64_t field = 0;
  RAMFERRY_CHANNEL_COUNTERS(RAMFERRY_STATS_FIELD)
#undef RAMFERRY_STATS_FIELD
};

// One row of RAMFERRY_CHANNEL_COUNTERS, for code that walks the counters.
struct ChannelCounter {
  const char* name;
  CounterMerge merge;
  CounterJson json;
  const char* doc;
  uint64_t ChannelStats::*field;
};

inline constexpr ChannelCounter kChannelCounters[] = {
#define RAMFERRY_COUNTER_ROW(field, merge, json, doc) \
  {#field, CounterMerge::merge, CounterJson::json, doc, &ChannelStats::field},
    RAMFERRY_CHANNEL_COUNTERS(RAMFERRY_COUNTER_ROW)
#undef RAMFERRY_COUNTER_ROW
};

// A data channel the session carried on without.
struct ChannelLoss {
  uint32_t channel = 0;
  // The round the channel was lost in: the oldest round the destination
  // had not confirmed. Its batches of that round went again on the other
  // channels.
  uint64_t round = 0;
  std::string reason;
};

struct SessionStats {
  std::vector<ChannelStats> channels;
  uint64_t rounds = 0;
  // Destination: connections refused (bad Hello, refusal, handshake
  // timeout, too many at once) and, of those, failed authentications.
  uint64_t connections_refused = 0;
  uint64_t auth_failures = 0;
  // Destination: sessions given up before their channels started (a
  // control connection that died, a region table that did not match,
  // channels that never all came), after which it waited for another
  // source; and the last one's reason.
  uint64_t sessions_abandoned = 0;
  std::string last_abandoned;
  // In the order they were lost.
  std::vector<ChannelLoss> channels_lost;
  // Source: pages sent a second time because their channel was lost.
  uint64_t resent_pages = 0;
  ChannelStats Total() const;
};

// "channel 2 in round 3 (why); channel 0 in round 5 (why)", or "" for none.
std::string DescribeChannelLosses(const std::vector<ChannelLoss>& losses);

}  // namespace ramferry

#endif  // RAMFERRY_STATS_H_
