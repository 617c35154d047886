#include "ramferry/stats.h"

#include <algorithm>

namespace ramferry {

ChannelStats SessionStats::Total() const {
  ChannelStats t;
  for (const ChannelStats& c : channels) {
    t.packets += c.packets;
    t.pages += c.pages;
    t.payload_bytes += c.payload_bytes;
    t.header_bytes += c.header_bytes;
    t.syncs += c.syncs;
    t.finishes += c.finishes;
    t.send_calls += c.send_calls;
    t.submit_calls += c.submit_calls;
    t.short_sends += c.short_sends;
    t.zc_sends += c.zc_sends;
    t.zc_completions += c.zc_completions;
    t.zc_copied += c.zc_copied;
    t.zc_notifications += c.zc_notifications;
    t.enobufs_retries += c.enobufs_retries;
    t.flushes += c.flushes;
    t.completion_wait_ns += c.completion_wait_ns;
    t.max_slots_in_flight =
        std::max(t.max_slots_in_flight, c.max_slots_in_flight);
    t.ring_max_occupancy = std::max(t.ring_max_occupancy, c.ring_max_occupancy);
    t.producer_wait_ns += c.producer_wait_ns;
    t.producer_wait_max_ns =
        std::max(t.producer_wait_max_ns, c.producer_wait_max_ns);
    t.consumer_idle_max_ns =
        std::max(t.consumer_idle_max_ns, c.consumer_idle_max_ns);
    t.recv_calls += c.recv_calls;
  }
  return t;
}

}  // namespace ramferry
