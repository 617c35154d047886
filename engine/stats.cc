#include "ramferry/stats.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ramferry {

ChannelStats SessionStats::Total() const {
  ChannelStats t;
  for (const ChannelStats& c : channels) {
    t.packets += c.packets;
    t.pages += c.pages;
    t.payload_bytes += c.payload_bytes;
    t.header_bytes += c.header_bytes;
    t.zero_pages += c.zero_pages;
    t.untouched_pages += c.untouched_pages;
    t.zero_range_packets += c.zero_range_packets;
    t.zero_pages_written += c.zero_pages_written;
    t.compressed_packets += c.compressed_packets;
    t.compressed_input_bytes += c.compressed_input_bytes;
    t.compressed_output_bytes += c.compressed_output_bytes;
    t.compress_ns += c.compress_ns;
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
    // Quantiles do not add up: the total keeps the worst channel's.
    t.send_latency_p50_ns =
        std::max(t.send_latency_p50_ns, c.send_latency_p50_ns);
    t.send_latency_p99_ns =
        std::max(t.send_latency_p99_ns, c.send_latency_p99_ns);
    t.thread_cpu_ns += c.thread_cpu_ns;
    t.rdma_posts += c.rdma_posts;
    t.rdma_wrs += c.rdma_wrs;
    t.rdma_outstanding_max =
        std::max(t.rdma_outstanding_max, c.rdma_outstanding_max);
    t.rdma_sq_full_hits += c.rdma_sq_full_hits;
    t.rdma_drains_to_zero += c.rdma_drains_to_zero;
    t.inline_sends += c.inline_sends;
    t.inline_max_bytes = std::max(t.inline_max_bytes, c.inline_max_bytes);
    t.inline_granted = std::max(t.inline_granted, c.inline_granted);
    t.register_round_trips += c.register_round_trips;
    t.register_batch_max = std::max(t.register_batch_max, c.register_batch_max);
    t.chunks_registered += c.chunks_registered;
    t.chunks_compressed += c.chunks_compressed;
    t.lost += c.lost;
  }
  return t;
}

std::string DescribeChannelLosses(const std::vector<ChannelLoss>& losses) {
  std::string out;
  for (const ChannelLoss& l : losses) {
    absl::StrAppendFormat(&out, "%schannel %d in round %d (%s)",
                          out.empty() ? "" : "; ", l.channel, l.round,
                          l.reason);
  }
  return out;
}

}  // namespace ramferry
