// ramferry-bench: moves a region between two processes on loopback and
// reports throughput, CPU and the transport's counters.
#include <cstdio>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "bench/loopback_transfer.h"
#include "bench/raw_baseline.h"
#include "ramferry/pinning.h"
#include "ramferry/region.h"
#include "ramferry/transport.h"
#include "tools/common/auth_flags.h"
#include "tools/common/channel_flags.h"
#include "tools/common/cli.h"
#include "tools/common/endpoints.h"
#include "tools/common/json.h"
#include "tools/common/link_summary.h"
#include "tools/common/stats_json.h"

namespace ramferry {

// --transport: migrate's choices (cli::TransportFlag: a kind or auto) and
// raw, refused as the command line is parsed when it names none of them.
struct BenchTransport {
  bool raw = false;
  cli::TransportFlag engine;
};
bool AbslParseFlag(absl::string_view text, BenchTransport* out,
                   std::string* error) {
  out->raw = text == "raw";
  if (out->raw) return true;
  if (!AbslParseFlag(text, &out->engine, error)) {
    absl::StrAppend(error, ", raw");
    return false;
  }
  return true;
}
std::string AbslUnparseFlag(const BenchTransport& t) {
  return t.raw ? "raw" : AbslUnparseFlag(t.engine);
}

}  // namespace ramferry

ABSL_FLAG(ramferry::BenchTransport, transport,
          (ramferry::BenchTransport{
              false,
              ramferry::cli::TransportFlag{ramferry::TransportKind::kTcp}}),
          "tcp | tcp-zerocopy | uring-zc | rdma | auto (chosen for --host, "
          "and the reason printed) | raw (a plain socket send loop, no "
          "engine: the yardstick)");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "address both ends use (rdma needs an RDMA device's address); a "
          "comma list A,B of this host's addresses on several links: the "
          "destination listens on all addresses (0.0.0.0), the channels "
          "spread over the list (channel i to item i % count), the control "
          "connection goes to the first");
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
ABSL_FLAG(
    bool, raw_whole_recv, false,
    "raw: the receiver reads each connection's whole slice in one call "
    "instead of send-size reads (an upper bound, see docs/benchmarks.md)");
ABSL_FLAG(uint64_t, seed, 1, "seed for the region's random content");
ABSL_FLAG(bool, json, false, "print one JSON object instead of a summary");

namespace ramferry {
namespace {

// What the flags ask for.
struct BenchRun {
  bench::TransferConfig config;
  bool raw = false;              // the plain-socket yardstick, no engine
  bool json = false;             // one JSON object instead of a summary
  std::string transport_reason;  // why --transport=auto chose its kind
};

absl::Status ApplyTransportFlags(BenchRun& run) {
  SessionOptions& s = run.config.session;
  const BenchTransport transport = absl::GetFlag(FLAGS_transport);
  run.raw = transport.raw;
  absl::StatusOr<std::vector<std::string>> hosts =
      cli::ParseHostList(absl::GetFlag(FLAGS_host));
  if (!hosts.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host: ", hosts.status().message()));
  }
  s.host = hosts->front();
  if (hosts->size() > 1) {
    if (run.raw) {
      return absl::InvalidArgumentError(
          "--transport=raw takes one --host: its connections do not spread");
    }
    // Port 0: the port the destination picks, once it listens.
    for (const std::string& h : *hosts) s.channel_endpoints.push_back({h, 0});
    run.config.listen_host =
        s.host.find(':') == std::string::npos ? "0.0.0.0" : "::";
  }
  RAMFERRY_RETURN_IF_ERROR(cli::ApplyChannelFlags(&s));
  if (run.raw) {
    // No engine: the kind is not read.
  } else if (const std::optional<TransportKind> kind = transport.engine.kind) {
    s.transport = *kind;
  } else {  // auto
    RAMFERRY_ASSIGN_OR_RETURN(
        std::string reason,
        cli::ChooseTransportFor(s.host, "ramferry-bench", &s));
    run.transport_reason = reason;
  }
  s.rdma_pin_all = absl::GetFlag(FLAGS_rdma_pin_all);
  s.rdma_reg_batch = absl::GetFlag(FLAGS_rdma_reg_batch);
  s.rdma_chunk_bytes = absl::GetFlag(FLAGS_rdma_chunk).bytes;
  s.rdma_max_inline = absl::GetFlag(FLAGS_rdma_max_inline);
  s.single_thread = absl::GetFlag(FLAGS_single_thread);
  RAMFERRY_RETURN_IF_ERROR(cli::ApplyAuthFlags(&s));
  // Both ends are the bench's own, on this machine: without a key it
  // measures the stream as it is (unauthenticated), and a protected one
  // (--protect=mac|encrypt) under a key only its two ends hold.
  if (s.auth_key.empty()) {
    if (s.protect == Protection::kMac || s.protect == Protection::kEncrypt) {
      s.auth_key = cli::EphemeralAuthKey();
    } else {
      s.insecure = true;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<BenchRun> RunFromFlags() {
  BenchRun run;
  RAMFERRY_RETURN_IF_ERROR(ApplyTransportFlags(run));
  bench::TransferConfig& c = run.config;
  c.bytes = absl::GetFlag(FLAGS_size).bytes;
  c.rounds = absl::GetFlag(FLAGS_rounds);
  c.dirty_fraction = absl::GetFlag(FLAGS_dirty_fraction);
  c.prefault_destination = absl::GetFlag(FLAGS_prefault);
  c.huge_pages = absl::GetFlag(FLAGS_huge_pages);
  c.raw_whole_receive = absl::GetFlag(FLAGS_raw_whole_recv);
  c.seed = absl::GetFlag(FLAGS_seed);
  run.json = absl::GetFlag(FLAGS_json);
  c.progress = !run.json;
  if (c.bytes == 0 || c.bytes % ramferry::kPageSize != 0 || c.rounds == 0 ||
      c.dirty_fraction < 0 || c.dirty_fraction > 1) {
    return absl::InvalidArgumentError(
        "--size must be a positive multiple of 4KiB, --rounds >= 1, "
        "--dirty_fraction in [0, 1]");
  }
  if (c.raw_whole_receive && !run.raw) {
    return absl::InvalidArgumentError(
        "--raw_whole_recv applies to --transport=raw only");
  }
  return run;
}

// Per-packet figures count every packet on the wire: data, SYNC and
// FINISH.
double PerWirePacket(uint64_t calls, const ChannelStats& t) {
  const uint64_t packets = t.packets + t.syncs + t.finishes;
  return packets ? double(calls) / packets : 0;
}

std::string TransportName(const BenchRun& run) {
  return run.raw ? "raw"
                 : std::string(TransportKindName(run.config.session.transport));
}

cli::Json ResultJson(const BenchRun& run, const bench::TransferResult& r) {
  const SessionOptions& s = run.config.session;
  const ChannelStats t = r.sender.Total();
  const double gib = r.bytes / double(1ull << 30);
  cli::Json j;
  j["transport"] = TransportName(run);
  j["raw_whole_recv"] = run.raw && run.config.raw_whole_receive;
  j["authenticated"] = !s.auth_key.empty();
  j["protect"] = ProtectionName(ResolvedProtection(s));
  j["transport_reason"] = run.transport_reason;
  j["channels"] = s.channels;
  j["completion"] = CompletionPolicyName(s.completion);
  j["packet_pages"] = s.packet_pages;
  j["header_slots"] = s.header_slots;
  j["registered_buffers"] = s.registered_buffers;
  j["region_bytes"] = run.config.bytes;
  j["rounds"] = r.rounds;
  j["bytes"] = r.bytes;
  j["seconds"] = r.seconds;
  j["setup_seconds"] = r.setup_seconds;
  j["gb_per_s"] = r.bytes / r.seconds / 1e9;
  j["sender_cpu_s"] = r.sender_cpu_s;
  j["receiver_cpu_s"] = r.receiver_cpu_s;
  j["sender_cpu_s_per_gib"] = r.sender_cpu_s / gib;
  j["receiver_cpu_s_per_gib"] = r.receiver_cpu_s / gib;
  j["submit_calls_per_packet"] = PerWirePacket(t.submit_calls, t);
  j["send_calls_per_packet"] = PerWirePacket(t.send_calls, t);
  j["single_thread"] = s.single_thread;
  j["rdma_pin_all"] = s.rdma_pin_all;
  j["rdma_reg_batch"] = s.rdma_reg_batch;
  j["pinned_bytes_bound"] =
      IsZeroCopy(s.transport) && !run.raw
          ? EstimatePinning(s, ramferry::kPageSize, run.config.bytes)
                .memlock_bytes
          : 0;
  j["vm_pin_peak_bytes"] = r.vm_pin_peak_bytes;
  j["sender_heap_peak_bytes"] = r.sender_heap_peak_bytes;
  j["dirty_bitmap_bytes"] = r.dirty_bitmap_bytes;
  j["receiver_recv_calls"] = r.receiver_recv_calls;
  j["prefaulted_destination"] = run.config.prefault_destination;
  j["verified"] = r.verified;
  // The sender's total of every counter, beside the run's own figures;
  // the channel threads' CPU time keeps the key it had.
  constexpr cli::CounterRename kRenames[] = {
      {&ChannelStats::thread_cpu_ns, "channel_threads_cpu_s"}};
  cli::AddCounterFields(j, t, kRenames);
  if (!s.channel_endpoints.empty()) {
    j["links"] = cli::LinksJson(cli::SummarizeLinks(r.sender, r.seconds));
  }
  return j;
}

std::string ResultLine(const BenchRun& run, const bench::TransferResult& r) {
  const ChannelStats t = r.sender.Total();
  const double gib = r.bytes / double(1ull << 30);
  // Memory registration (rdma): what the source pinned, once a session,
  // and how fast.
  std::string registered;
  if (t.rdma_registered_bytes > 0) {
    const double s = t.rdma_register_ns / 1e9;
    registered = absl::StrFormat(
        "; registered %s in %.3fs (%.0f MiB/s)",
        cli::FormatBytes(t.rdma_registered_bytes), s,
        s > 0 ? t.rdma_registered_bytes / double(1 << 20) / s : 0.0);
  }
  return absl::StrFormat(
             "%s x%d: %s in %.3fs = %.2f GB/s; CPU s/GiB sender %.2f receiver "
             "%.2f; %d packets, %.2f send calls/packet, zc copied %d/%d%s; "
             "verified: %s\n",
             TransportName(run), run.config.session.channels,
             cli::FormatBytes(r.bytes), r.seconds, r.bytes / r.seconds / 1e9,
             r.sender_cpu_s / gib, r.receiver_cpu_s / gib, t.packets,
             PerWirePacket(t.send_calls, t), t.zc_copied, t.zc_completions,
             registered, r.verified ? "yes" : "NO") +
         (run.config.session.channel_endpoints.empty()
              ? ""
              : cli::LinksTable(cli::SummarizeLinks(r.sender, r.seconds)));
}

int Main() {
  absl::StatusOr<BenchRun> run = RunFromFlags();
  if (!run.ok()) {
    std::fprintf(stderr, "ramferry-bench: %s\n",
                 std::string(run.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<bench::TransferResult> r =
      run->raw ? bench::RunRawBaseline(run->config)
               : bench::RunLoopbackTransfer(run->config);
  if (!r.ok()) {
    std::fprintf(stderr, "ramferry-bench: %s\n",
                 std::string(r.status().message()).c_str());
    return 1;
  }
  if (run->json) {
    std::printf("%s\n", cli::DumpJson(ResultJson(*run, *r)).c_str());
  } else {
    std::fputs(ResultLine(*run, *r).c_str(), stdout);
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
