// ramferry-bench: moves a region between two processes on loopback and
// reports throughput, CPU and the transport's counters.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "bench/loopback_transfer.h"
#include "bench/raw_baseline.h"
#include "ramferry/pinning.h"
#include "ramferry/region.h"
#include "ramferry/transport.h"
#include "tools/common/auth_flags.h"
#include "tools/common/channel_flags.h"
#include "tools/common/cli.h"
#include "tools/common/stats_json.h"

ABSL_FLAG(std::string, transport, "tcp",
          "tcp | tcp-zerocopy | uring-zc | rdma | auto (chosen for --host, "
          "and the reason printed) | raw (a plain socket send loop, no "
          "engine: the yardstick)");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "address both ends use (rdma needs an RDMA device's address)");
ABSL_FLAG(bool, rdma_pin_all, false,
          "rdma: register whole regions up front instead of chunks on "
          "demand");
ABSL_FLAG(bool, rdma_reg_batch, true,
          "rdma: many chunks per REGISTER_REQUEST (false: one each)");
ABSL_FLAG(ramferry::cli::ByteSize, rdma_chunk, ramferry::cli::ByteSize{1 << 20},
          "rdma: on-demand registration unit");
ABSL_FLAG(uint32_t, rdma_max_inline, 512,
          "rdma: inline room to ask the QP for (it may grant less)");
ABSL_FLAG(bool, single_thread, false,
          "no channel threads: the scheduler drives each channel itself");
ABSL_FLAG(ramferry::cli::ByteSize, size, ramferry::cli::ByteSize{1ull << 30},
          "region size (e.g. 256MiB, 1GiB)");
ABSL_FLAG(uint32_t, rounds, 1,
          "rounds: the first sends every page, later ones --dirty-fraction");
ABSL_FLAG(double, dirty_fraction, 0.1,
          "share of pages rewritten and resent in each round after the first");
ABSL_FLAG(bool, prefault, true,
          "pre-fault the destination before timing (--noprefault: cold)");
ABSL_FLAG(bool, huge_pages, false, "transparent huge pages on both ends");
ABSL_FLAG(bool, raw_whole_recv, false,
          "raw: the receiver reads each connection's whole slice in one call "
          "instead of send-size reads (an upper bound, see the README)");
ABSL_FLAG(uint64_t, seed, 1, "seed for the region's random content");
ABSL_FLAG(bool, json, false, "print one JSON object instead of a summary");

namespace ramferry {
namespace {

int Main() {
  bench::TransferConfig c;
  std::string transport_reason;
  const bool raw = absl::GetFlag(FLAGS_transport) == "raw";
  c.session.host = absl::GetFlag(FLAGS_host);
  absl::Status flags_ok = cli::ApplyChannelFlags(&c.session);
  if (flags_ok.ok() && absl::GetFlag(FLAGS_transport) == "auto") {
    absl::StatusOr<std::string> reason =
        cli::ChooseTransportFor(c.session.host, "ramferry-bench", &c.session);
    if (reason.ok()) transport_reason = *reason;
    flags_ok = reason.status();
  } else if (flags_ok.ok() && !raw) {
    absl::StatusOr<TransportKind> kind =
        ParseTransportKind(absl::GetFlag(FLAGS_transport));
    if (kind.ok()) c.session.transport = *kind;
    flags_ok = kind.status();
  }
  if (!flags_ok.ok()) {
    std::fprintf(stderr, "ramferry-bench: %s\n",
                 std::string(flags_ok.message()).c_str());
    return 2;
  }
  c.session.rdma_pin_all = absl::GetFlag(FLAGS_rdma_pin_all);
  c.session.rdma_reg_batch = absl::GetFlag(FLAGS_rdma_reg_batch);
  c.session.rdma_chunk_bytes = absl::GetFlag(FLAGS_rdma_chunk).bytes;
  c.session.rdma_max_inline = absl::GetFlag(FLAGS_rdma_max_inline);
  c.session.single_thread = absl::GetFlag(FLAGS_single_thread);
  absl::StatusOr<std::string> key = cli::AuthKeyFromFlags();
  if (!key.ok()) {
    std::fprintf(stderr, "ramferry-bench: %s\n",
                 std::string(key.status().message()).c_str());
    return 2;
  }
  c.session.auth_key = *key;
  if (!raw) cli::WarnIfUnauthenticated(*key, "ramferry-bench");
  c.bytes = absl::GetFlag(FLAGS_size).bytes;
  c.rounds = absl::GetFlag(FLAGS_rounds);
  c.dirty_fraction = absl::GetFlag(FLAGS_dirty_fraction);
  c.prefault_destination = absl::GetFlag(FLAGS_prefault);
  c.huge_pages = absl::GetFlag(FLAGS_huge_pages);
  c.raw_whole_receive = absl::GetFlag(FLAGS_raw_whole_recv);
  c.seed = absl::GetFlag(FLAGS_seed);
  const bool json = absl::GetFlag(FLAGS_json);
  c.progress = !json;
  if (c.bytes == 0 || c.bytes % ramferry::kPageSize != 0 || c.rounds == 0 ||
      c.dirty_fraction < 0 || c.dirty_fraction > 1) {
    std::fprintf(stderr,
                 "ramferry-bench: --size must be a positive multiple of 4KiB, "
                 "--rounds >= 1, --dirty_fraction in [0, 1]\n");
    return 2;
  }
  if (c.raw_whole_receive && !raw) {
    std::fprintf(stderr,
                 "ramferry-bench: --raw_whole_recv applies to --transport=raw "
                 "only\n");
    return 2;
  }

  absl::StatusOr<bench::TransferResult> r =
      raw ? bench::RunRawBaseline(c) : bench::RunLoopbackTransfer(c);
  if (!r.ok()) {
    std::fprintf(stderr, "ramferry-bench: %s\n",
                 std::string(r.status().message()).c_str());
    return 1;
  }
  const ChannelStats t = r->sender.Total();
  const double gib = r->bytes / double(1ull << 30);
  const double gbps = r->bytes / r->seconds / 1e9;
  // Every packet on the wire: data, SYNC and FINISH.
  const uint64_t wire_packets = t.packets + t.syncs + t.finishes;
  const double calls_per_packet =
      wire_packets ? double(t.send_calls) / wire_packets : 0;
  const std::string transport_name(
      raw ? "raw" : TransportKindName(c.session.transport));
  if (json) {
    cli::JsonWriter w;
    w.BeginObject()
        .Key("transport")
        .String(transport_name)
        .Key("raw_whole_recv")
        .Bool(raw && c.raw_whole_receive)
        .Key("authenticated")
        .Bool(!c.session.auth_key.empty())
        .Key("transport_reason")
        .String(transport_reason)
        .Key("channels")
        .Uint(c.session.channels)
        .Key("completion")
        .String(CompletionPolicyName(c.session.completion))
        .Key("packet_pages")
        .Uint(c.session.packet_pages)
        .Key("header_slots")
        .Uint(c.session.header_slots)
        .Key("registered_buffers")
        .Bool(c.session.registered_buffers)
        .Key("region_bytes")
        .Uint(c.bytes)
        .Key("rounds")
        .Uint(r->rounds)
        .Key("bytes")
        .Uint(r->bytes)
        .Key("seconds")
        .Number(r->seconds)
        .Key("setup_seconds")
        .Number(r->setup_seconds)
        .Key("gb_per_s")
        .Number(gbps)
        .Key("sender_cpu_s")
        .Number(r->sender_cpu_s)
        .Key("receiver_cpu_s")
        .Number(r->receiver_cpu_s)
        .Key("sender_cpu_s_per_gib")
        .Number(r->sender_cpu_s / gib)
        .Key("receiver_cpu_s_per_gib")
        .Number(r->receiver_cpu_s / gib)
        .Key("submit_calls_per_packet")
        .Number(wire_packets ? double(t.submit_calls) / wire_packets : 0)
        .Key("send_calls_per_packet")
        .Number(calls_per_packet)
        .Key("single_thread")
        .Bool(c.session.single_thread)
        .Key("rdma_pin_all")
        .Bool(c.session.rdma_pin_all)
        .Key("rdma_reg_batch")
        .Bool(c.session.rdma_reg_batch)
        .Key("pinned_bytes_bound")
        .Uint(
            IsZeroCopy(c.session.transport) && !raw
                ? EstimatePinning(c.session, ramferry::kPageSize).memlock_bytes
                : 0)
        .Key("vm_pin_peak_bytes")
        .Uint(r->vm_pin_peak_bytes)
        .Key("sender_heap_peak_bytes")
        .Uint(r->sender_heap_peak_bytes)
        .Key("dirty_bitmap_bytes")
        .Uint(r->dirty_bitmap_bytes)
        .Key("receiver_recv_calls")
        .Uint(r->receiver_recv_calls)
        .Key("prefaulted_destination")
        .Bool(c.prefault_destination)
        .Key("verified")
        .Bool(r->verified);
    // The sender's total of every counter, beside the run's own figures;
    // the channel threads' CPU time keeps the key it had.
    constexpr cli::CounterRename kRenames[] = {
        {&ChannelStats::thread_cpu_ns, "channel_threads_cpu_s"}};
    cli::WriteCounterFields(w, t, kRenames);
    w.EndObject();
    std::printf("%s\n", w.str().c_str());
  } else {
    absl::PrintF(
        "%s x%d: %s in %.3fs = %.2f GB/s; CPU s/GiB sender %.2f receiver "
        "%.2f; %d packets, %.2f send calls/packet, zc copied %d/%d; "
        "verified: %s\n",
        transport_name, c.session.channels, cli::FormatBytes(r->bytes),
        r->seconds, gbps, r->sender_cpu_s / gib, r->receiver_cpu_s / gib,
        t.packets, calls_per_packet, t.zc_copied, t.zc_completions,
        r->verified ? "yes" : "NO");
  }
  return r->verified ? 0 : 3;
}

}  // namespace
}  // namespace ramferry

int main(int argc, char** argv) {
  ramferry::cli::InitBinary(
      argc, argv,
      "moves a memory region between two processes on loopback over N "
      "channels and reports throughput, CPU and transport counters.\n"
      "  ramferry-bench --transport=tcp-zerocopy --channels=4 --size=1GiB "
      "--json",
      __FILE__);
  return ramferry::Main();
}
