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
      .Key("recv_calls")
      .Uint(c.recv_calls)
      .EndObject();
}

void WriteChannelArray(JsonWriter& w, const SessionStats& s) {
  w.BeginArray();
  for (const ChannelStats& c : s.channels) WriteChannelStats(w, c);
  w.EndArray();
}

}  // namespace ramferry::cli
