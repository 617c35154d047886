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

// Post-copy, on either end (zeros until the switch). Latencies are the
// destination's: from the moment its fault reader took a fault to the
// placement of that page, in power-of-two microsecond buckets (bucket 0:
// under 1 us; bucket k: [2^(k-1), 2^k) us), like QEMU's post-copy
// histogram. Percentiles are the upper bound of their bucket, clamped to
// the exact maximum.
struct PostcopyStats {
  bool started = false;         // the destination armed
  bool urgent_channel = false;  // requests had a connection of their own
  // Pages the destination lacked at the switch.
  uint64_t missing_pages = 0;
  // Pages asked for by a fault (destination: sent; source: answered).
  uint64_t requested_pages = 0;
  // Pages that travelled as answers to requests (source: sent on the
  // urgent channel; destination: placed from it).
  uint64_t urgent_pages = 0;
  // Pages pushed on the bulk channels, unrequested (source).
  uint64_t pushed_pages = 0;
  // Destination: copies that arrived after their page was placed (by the
  // other path), dropped without a write.
  uint64_t duplicate_pages = 0;
  // Destination: fault messages read from the userfaultfd (repeats too),
  // and faults on pages not awaited, resolved locally with a zero page.
  uint64_t fault_messages = 0;
  uint64_t local_zero_faults = 0;
  // The switch: from the source's StartPostcopy (destination: the first
  // MISSING_PAGES) to armed. The rest: from armed to the last page placed
  // (destination) or pushed and confirmed (source).
  uint64_t switch_ns = 0;
  uint64_t duration_ns = 0;
  // Sessions that picked post-copy up again after a lost connection
  // (Sender::ResumePostcopy).
  uint64_t resumes = 0;
  // Destination fault latency.
  std::vector<uint64_t> latency_buckets;  // empty until the switch
  // The sum of latency_buckets: faults timed from their read to their
  // page's placement; at most fault_messages. Not at most requested_pages:
  // a fault whose page the push placed while the fault was being read is
  // timed but never requested.
  uint64_t faults = 0;
  uint64_t latency_p50_us = 0;
  uint64_t latency_p99_us = 0;
  uint64_t latency_max_us = 0;
  uint64_t blocked_us = 0;  // over every fault
};

// A carried stream (SessionOptions::streams), at either end.
struct StreamStats {
  uint32_t stream = 0;
  uint32_t channel = 0;  // the data channel that carries it
  // Source: bytes read from its peer; destination: bytes delivered to its
  // peer.
  uint64_t forward_bytes = 0;
  // Source: of forward_bytes, those out on the channel (0 at the
  // destination).
  uint64_t sent_bytes = 0;
  // The way back (the destination's peer to the source's): bytes written
  // to the source's peer, or read from the destination's.
  uint64_t back_bytes = 0;
  bool forward_ended = false;  // its end was sent, or delivered
  bool back_ended = false;
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
  // channels that never all came), each counted once the destination
  // admits another source; and the last one's reason.
  uint64_t sessions_abandoned = 0;
  std::string last_abandoned;
  // In the order they were lost.
  std::vector<ChannelLoss> channels_lost;
  // Source: pages sent a second time because their channel was lost.
  uint64_t resent_pages = 0;
  PostcopyStats postcopy;
  // Carried streams, by id (SessionOptions::streams).
  std::vector<StreamStats> streams;
  ChannelStats Total() const;
};

// "channel 2 in round 3 (why); channel 0 in round 5 (why)", or "" for none.
std::string DescribeChannelLosses(const std::vector<ChannelLoss>& losses);

}  // namespace ramferry

#endif  // RAMFERRY_STATS_H_
