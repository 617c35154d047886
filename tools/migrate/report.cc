#include "tools/migrate/report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ramferry/region.h"
#include "tools/common/cli.h"
#include "tools/common/stats_json.h"

namespace ramferry::migrate {
namespace {

void StatusFields(cli::JsonWriter& w, const absl::Status& s) {
  w.Key("ok").Bool(s.ok());
  w.Key("error");
  if (s.ok()) {
    w.Null();
  } else {
    w.String(
        absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message()));
  }
}

double Throughput(const PrecopyReport& r) {
  return r.transfer_s > 0 ? r.bytes_sent / r.transfer_s / 1e9 : 0;
}

// Which channels the session went on without, and what that cost.
std::string LossLine(const SessionStats& s) {
  if (s.channels_lost.empty()) return "none";
  return absl::StrFormat("%s; %d pages re-sent on the others",
                         DescribeChannelLosses(s.channels_lost),
                         s.resent_pages);
}

// What zero pages saved: "N zero pages as offsets, M never-touched pages
// as ranges: X not sent".
std::string ZeroLine(const ChannelStats& t) {
  return absl::StrFormat(
      "%d zero pages as offsets, %d never-touched as ranges: %s not sent",
      t.zero_pages, t.untouched_pages,
      cli::FormatBytes((t.zero_pages + t.untouched_pages) * kPageSize));
}

void ZeroFields(cli::JsonWriter& w, const ChannelStats& t) {
  w.Key("zero_pages")
      .Uint(t.zero_pages)
      .Key("untouched_pages")
      .Uint(t.untouched_pages)
      .Key("zero_range_packets")
      .Uint(t.zero_range_packets)
      .Key("zero_pages_written")
      .Uint(t.zero_pages_written)
      .Key("payload_bytes")
      .Uint(t.payload_bytes)
      .Key("bytes_saved")
      .Uint((t.zero_pages + t.untouched_pages) * kPageSize);
}

}  // namespace

std::string SourceJson(const RunDescription& run, const PrecopyReport& r,
                       const std::string& destination_json) {
  cli::JsonWriter w;
  w.BeginObject().Key("role").String("source");
  StatusFields(w, r.status);
  w.Key("transport")
      .String(run.transport)
      .Key("transport_reason")
      .String(run.transport_reason)
      .Key("completion")
      .String(run.completion)
      .Key("channels")
      .Uint(run.channels)
      .Key("authenticated")
      .Bool(run.authenticated)
      .Key("region_bytes")
      .Uint(run.region_bytes)
      .Key("region")
      .String(run.region)
      .Key("image")
      .String(run.image)
      .Key("dirty_tracking")
      .String(run.dirty_tracking)
      .Key("workload")
      .BeginObject()
      .Key("dirty_set_bytes")
      .Uint(run.dirty_set_bytes)
      .Key("dirty_rate_bytes_per_s")
      .Number(run.dirty_rate_bytes_per_s)
      .Key("writers")
      .Int(run.writers)
      .Key("pages_written")
      .Uint(r.workload_pages_written)
      .Key("running_after")
      .Bool(r.workload_running_after)
      .EndObject()
      .Key("downtime_limit_s")
      .Number(run.downtime_limit_s)
      .Key("max_rounds")
      .Uint(run.max_rounds)
      .Key("total_s")
      .Number(r.total_s)
      .Key("prepare_s")
      .Number(r.prepare_s)
      .Key("setup_s")
      .Number(r.setup_s)
      .Key("transfer_s")
      .Number(r.transfer_s)
      .Key("verify_s")
      .Number(r.verify_s)
      .Key("downtime_s")
      .Number(r.downtime_s)
      .Key("downtime_final_collect_s")
      .Number(r.final_collect_s)
      .Key("downtime_final_round_s")
      .Number(r.final_round_s)
      .Key("downtime_if_verified_first_s")
      .Number(r.downtime_s + r.verify_s)
      .Key("collect_s")
      .Number(r.collect_s)
      .Key("verify_mode")
      .String(run.verify_mode)
      .Key("rounds")
      .Uint(r.rounds.size())
      .Key("converged_by")
      .String(r.converged_by)
      .Key("estimated_final_round_s")
      .Number(r.estimated_final_s)
      .Key("dirty_rate_pages_per_s")
      .Number(r.dirty_pages_per_s)
      .Key("bytes_sent")
      .Uint(r.bytes_sent)
      .Key("bytes_resent")
      .Uint(r.bytes_resent)
      .Key("throughput_gb_per_s")
      .Number(Throughput(r))
      .Key("pages_per_round")
      .BeginArray();
  for (const RoundRecord& rr : r.rounds) w.Uint(rr.pages);
  w.EndArray().Key("round_seconds").BeginArray();
  for (const RoundRecord& rr : r.rounds) w.Number(rr.seconds);
  w.EndArray()
      .Key("confirmed_rounds")
      .Uint(r.confirmed_rounds)
      .Key("pages_verified")
      .Uint(r.pages_verified)
      .Key("pages_mismatched")
      .Uint(r.pages_mismatched)
      .Key("verified")
      .Bool(r.verified)
      .Key("resent_pages")
      .Uint(r.stats.resent_pages);
  ZeroFields(w, r.stats.Total());
  w.Key("channels_lost");
  cli::WriteChannelLosses(w, r.stats);
  w.Key("channel_stats");
  cli::WriteChannelArray(w, r.stats);
  if (!destination_json.empty()) {
    w.Key("destination").Raw(destination_json);
  }
  w.EndObject();
  return w.str();
}

std::string SourceTable(const RunDescription& run, const PrecopyReport& r) {
  std::string t;
  absl::StrAppendFormat(
      &t, "ramferry-migrate: %s, %s over %d %s channel%s (%s tracking, %s)\n",
      r.status.ok() ? "migrated" : "FAILED", cli::FormatBytes(run.region_bytes),
      run.channels, run.transport, run.channels == 1 ? "" : "s",
      run.dirty_tracking,
      run.authenticated ? "authenticated" : "UNAUTHENTICATED");
  if (!run.transport_reason.empty()) {
    absl::StrAppendFormat(&t, "  transport        %s\n", run.transport_reason);
  }
  if (!r.status.ok()) {
    absl::StrAppendFormat(&t, "  error            %s\n", r.status.ToString());
    absl::StrAppendFormat(&t,
                          "  confirmed rounds %d (the destination applied "
                          "these in full)\n",
                          r.confirmed_rounds);
    absl::StrAppendFormat(&t, "  workload         %s\n",
                          r.workload_running_after ? "still running on the "
                                                     "source"
                                                   : "not writing");
  }
  absl::StrAppendFormat(&t, "  total            %.3f s\n", r.total_s);
  absl::StrAppendFormat(&t,
                        "  prepare          %.3f s (map the memory, arm the "
                        "tracking; before the total)\n",
                        r.prepare_s);
  absl::StrAppendFormat(&t, "  setup            %.3f s\n", r.setup_s);
  absl::StrAppendFormat(&t, "  transfer phase   %.3f s\n", r.transfer_s);
  absl::StrAppendFormat(&t, "  throughput       %.2f GB/s\n", Throughput(r));
  absl::StrAppendFormat(&t,
                        "  downtime         %.1f ms (final-round estimate "
                        "limit %.0f ms): last collect %.1f ms, final round "
                        "%.1f ms (its pages + one round trip)\n",
                        r.downtime_s * 1e3, run.downtime_limit_s * 1e3,
                        r.final_collect_s * 1e3, r.final_round_s * 1e3);
  absl::StrAppendFormat(&t,
                        "  verification     %s, %.1f ms after the switchover "
                        "(source paused; a destination that waits for it "
                        "resumes at %.1f ms)\n",
                        run.verify_mode, r.verify_s * 1e3,
                        (r.downtime_s + r.verify_s) * 1e3);
  absl::StrAppendFormat(&t, "  rounds           %d (stopped by %s)\n",
                        r.rounds.size(),
                        r.converged_by.empty() ? "-" : r.converged_by);
  std::vector<std::string> pages;
  for (const RoundRecord& rr : r.rounds) {
    pages.push_back(absl::StrCat(rr.pages, rr.final ? "*" : ""));
  }
  absl::StrAppendFormat(&t, "  pages per round  %s  (* = workload paused)\n",
                        absl::StrJoin(pages, " "));
  absl::StrAppendFormat(&t, "  sent / re-sent   %s / %s\n",
                        cli::FormatBytes(r.bytes_sent),
                        cli::FormatBytes(r.bytes_resent));
  absl::StrAppendFormat(&t, "  memory image     %s\n", run.image);
  absl::StrAppendFormat(&t, "  zero pages       %s\n",
                        ZeroLine(r.stats.Total()));
  absl::StrAppendFormat(
      &t, "  dirty rate       %s/s while running\n",
      cli::FormatBytes(static_cast<uint64_t>(r.dirty_pages_per_s * kPageSize)));
  if (run.verify_mode == "off") {
    t += "  verified         not checked (--verify=off)\n";
  } else {
    absl::StrAppendFormat(&t,
                          "  verified         %s (%d pages checked, %d "
                          "differ)\n",
                          r.verified ? "true" : "false", r.pages_verified,
                          r.pages_mismatched);
  }
  absl::StrAppendFormat(&t, "  channels lost    %s\n", LossLine(r.stats));
  t += "  channel  packets   pages     send calls  zc sent/done/copied  "
       "flushes  wait ms\n";
  for (const ChannelStats& c : r.stats.channels) {
    absl::StrAppendFormat(
        &t, "  %-7d  %-8d  %-8d  %-10d  %-19s  %-7d  %.1f\n", c.channel,
        c.packets, c.pages, c.send_calls,
        absl::StrFormat("%d/%d/%d", c.zc_sends, c.zc_completions, c.zc_copied),
        c.flushes, c.completion_wait_ns * 1e-6);
  }
  return t;
}

std::string DestinationJson(const DestinationReport& r) {
  cli::JsonWriter w;
  w.BeginObject().Key("role").String("destination");
  StatusFields(w, r.status);
  w.Key("prefault")
      .String(PrefaultName(r.prefault))
      .Key("prefault_s")
      .Number(r.prefault_s)
      .Key("prefault_bytes")
      .Uint(r.prefault_bytes)
      .Key("page_faults")
      .Uint(r.page_faults)
      .Key("serve_s")
      .Number(r.serve_s)
      .Key("cpu_s")
      .Number(r.cpu_s)
      .Key("rounds_applied")
      .Uint(r.rounds_applied)
      .Key("pages_verified")
      .Uint(r.pages_verified)
      .Key("verified")
      .Bool(r.verified)
      .Key("connections_refused")
      .Uint(r.stats.connections_refused)
      .Key("auth_failures")
      .Uint(r.stats.auth_failures);
  ZeroFields(w, r.stats.Total());
  w.Key("channels_lost");
  cli::WriteChannelLosses(w, r.stats);
  w.Key("channel_stats");
  cli::WriteChannelArray(w, r.stats);
  w.EndObject();
  return w.str();
}

std::string DestinationTable(const DestinationReport& r) {
  return absl::StrFormat(
      "destination: %s; %d rounds applied, %d pages verified by the "
      "source, pre-fault %s %.2f s (%s), %d page faults, served %.2f s, CPU "
      "%.2f s; %d connections refused (%d failed authentication); zero "
      "pages: %d written, the rest already read as zero%s%s\n",
      r.status.ok() ? "done" : "FAILED", r.rounds_applied, r.pages_verified,
      PrefaultName(r.prefault), r.prefault_s,
      cli::FormatBytes(r.prefault_bytes), r.page_faults, r.serve_s, r.cpu_s,
      r.stats.connections_refused, r.stats.auth_failures,
      r.stats.Total().zero_pages_written,
      r.stats.channels_lost.empty()
          ? ""
          : absl::StrCat("\n  channels lost: ",
                         DescribeChannelLosses(r.stats.channels_lost)),
      r.status.ok() ? "" : absl::StrCat("\n  error: ", r.status.ToString()));
}

}  // namespace ramferry::migrate
