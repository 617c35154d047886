#include "tools/common/stats_json.h"

namespace ramferry::cli {

void WriteChannelStats(JsonWriter& w, const ChannelStats& c) {
  w.BeginObject()
      .Key("channel")
      .Uint(c.channel)
      .Key("packets")
      .Uint(c.packets)
      .Key("pages")
      .Uint(c.pages)
      .Key("payload_bytes")
      .Uint(c.payload_bytes)
      .Key("header_bytes")
      .Uint(c.header_bytes)
      .Key("zero_pages")
      .Uint(c.zero_pages)
      .Key("untouched_pages")
      .Uint(c.untouched_pages)
      .Key("zero_range_packets")
      .Uint(c.zero_range_packets)
      .Key("zero_pages_written")
      .Uint(c.zero_pages_written)
      .Key("syncs")
      .Uint(c.syncs)
      .Key("finishes")
      .Uint(c.finishes)
      .Key("send_calls")
      .Uint(c.send_calls)
      .Key("submit_calls")
      .Uint(c.submit_calls)
      .Key("short_sends")
      .Uint(c.short_sends)
      .Key("zc_sends")
      .Uint(c.zc_sends)
      .Key("zc_completions")
      .Uint(c.zc_completions)
      .Key("zc_copied")
      .Uint(c.zc_copied)
      .Key("zc_notifications")
      .Uint(c.zc_notifications)
      .Key("enobufs_retries")
      .Uint(c.enobufs_retries)
      .Key("flushes")
      .Uint(c.flushes)
      .Key("completion_wait_s")
      .Number(c.completion_wait_ns * 1e-9)
      .Key("max_slots_in_flight")
      .Uint(c.max_slots_in_flight)
      .Key("ring_max_occupancy")
      .Uint(c.ring_max_occupancy)
      .Key("producer_wait_s")
      .Number(c.producer_wait_ns * 1e-9)
      .Key("consumer_idle_max_s")
      .Number(c.consumer_idle_max_ns * 1e-9)
      .Key("rdma_posts")
      .Uint(c.rdma_posts)
      .Key("rdma_wrs")
      .Uint(c.rdma_wrs)
      .Key("rdma_outstanding_max")
      .Uint(c.rdma_outstanding_max)
      .Key("rdma_sq_full_hits")
      .Uint(c.rdma_sq_full_hits)
      .Key("rdma_drains_to_zero")
      .Uint(c.rdma_drains_to_zero)
      .Key("inline_sends")
      .Uint(c.inline_sends)
      .Key("inline_max_bytes")
      .Uint(c.inline_max_bytes)
      .Key("inline_granted")
      .Uint(c.inline_granted)
      .Key("register_round_trips")
      .Uint(c.register_round_trips)
      .Key("register_batch_max")
      .Uint(c.register_batch_max)
      .Key("chunks_registered")
      .Uint(c.chunks_registered)
      .Key("chunks_compressed")
      .Uint(c.chunks_compressed)
      .Key("send_latency_p50_us")
      .Number(c.send_latency_p50_ns * 1e-3)
      .Key("send_latency_p99_us")
      .Number(c.send_latency_p99_ns * 1e-3)
      .Key("thread_cpu_s")
      .Number(c.thread_cpu_ns * 1e-9)
      .Key("recv_calls")
      .Uint(c.recv_calls)
      .Key("lost")
      .Uint(c.lost)
      .EndObject();
}

void WriteChannelArray(JsonWriter& w, const SessionStats& s) {
  w.BeginArray();
  for (const ChannelStats& c : s.channels) WriteChannelStats(w, c);
  w.EndArray();
}

void WriteChannelLosses(JsonWriter& w, const SessionStats& s) {
  w.BeginArray();
  for (const ChannelLoss& l : s.channels_lost) {
    w.BeginObject()
        .Key("channel")
        .Uint(l.channel)
        .Key("round")
        .Uint(l.round)
        .Key("reason")
        .String(l.reason)
        .EndObject();
  }
  w.EndArray();
}

}  // namespace ramferry::cli
