#include "tools/migrate/report.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ramferry/region.h"
#include "tools/common/cli.h"
#include "tools/common/json.h"
#include "tools/common/link_summary.h"
#include "tools/common/stats_json.h"

namespace ramferry::migrate {
namespace {

void AddStatusFields(cli::Json& j, const absl::Status& s) {
  j["ok"] = s.ok();
  j["error"] = s.ok()
                   ? cli::Json(nullptr)
                   : cli::Json(absl::StrCat(absl::StatusCodeToString(s.code()),
                                            ": ", s.message()));
}

// "migrated", "cancelled" (--on-timeout=cancel, or a --control client
// cancelled) or "failed".
const char* Outcome(const PrecopyReport& r) {
  if (r.status.ok()) return "migrated";
  if (r.outcome_unknown) return "unknown";
  return r.cancelled ? "cancelled" : "failed";
}

// Pages covered (bytes_sent counts a zero page or a never-touched one as
// its whole page, though only its offset travelled) per second of the
// transfer phase.
double Throughput(const PrecopyReport& r) {
  return r.transfer_s > 0 ? r.bytes_sent / r.transfer_s / 1e9 : 0;
}

// What went on the data channels: headers and payloads (compressed ones
// as they went), no page that travelled as an offset or a range.
uint64_t WireBytes(const PrecopyReport& r) {
  const ChannelStats t = r.stats.Total();
  return t.payload_bytes + t.header_bytes;
}

double WireThroughput(const PrecopyReport& r) {
  return r.transfer_s > 0 ? WireBytes(r) / r.transfer_s / 1e9 : 0;
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

void AddZeroFields(cli::Json& j, const ChannelStats& t) {
  j["zero_pages"] = t.zero_pages;
  j["untouched_pages"] = t.untouched_pages;
  j["zero_range_packets"] = t.zero_range_packets;
  j["zero_pages_written"] = t.zero_pages_written;
  j["payload_bytes"] = t.payload_bytes;
  j["bytes_saved"] = (t.zero_pages + t.untouched_pages) * kPageSize;
}

// The rate --demo-link limited the link to `endpoint` to, or "".
std::string LinkRate(const RunDescription& run, absl::string_view endpoint) {
  for (const auto& [host, rate] : run.link_rates) {
    if (absl::StartsWith(endpoint, absl::StrCat(host, ":"))) return rate;
  }
  return "";
}

// Whether the downtime passed its limit (0: none set).
bool DowntimeOverLimit(const RunDescription& run, const PrecopyReport& r) {
  return !r.switchover.empty() && run.downtime_limit_s > 0 &&
         r.downtime_s > run.downtime_limit_s;
}

const char* OverLimitNote(const RunDescription& run, const PrecopyReport& r) {
  return DowntimeOverLimit(run, r) ? " OVER THE LIMIT" : "";
}

// Per link: its channels, bytes and rate over the transfer, and the rate
// --demo-link gave it.
cli::Json LinksJson(const RunDescription& run, const PrecopyReport& r) {
  const std::vector<cli::LinkSummary> links =
      cli::SummarizeLinks(r.stats, r.transfer_s);
  cli::Json j = cli::LinksJson(links);
  for (size_t i = 0; i < links.size(); ++i) {
    if (std::string rate = LinkRate(run, links[i].endpoint); !rate.empty()) {
      j[i]["rate"] = rate;
    }
  }
  return j;
}

// The source's post-copy object: its counters, the mode, how it switched
// over and the two phases as the source timed them.
cli::Json SourcePostcopyJson(const RunDescription& run,
                             const PrecopyReport& r) {
  cli::Json j = cli::PostcopyStatsJson(r.stats.postcopy);
  j["mode"] = run.postcopy;
  j["urgent_channel_asked"] = run.postcopy_urgent;
  j["missing_pages_at_switch"] = r.postcopy_missing_pages;
  j["start_postcopy_s"] = r.switch_s;
  j["complete_postcopy_s"] = r.postcopy_s;
  j["workload_kept_paused"] = r.workload_kept_paused;
  j["resumed"] = r.postcopy_resumes;
  j["cut_error"] = r.postcopy_cut_error;
  return j;
}

// "[lo,hi) us: n" for every non-empty bucket, two spaces apart.
std::string HistogramLine(const PostcopyStats& p) {
  std::vector<std::string> buckets;
  for (size_t k = 0; k < p.latency_buckets.size(); ++k) {
    if (p.latency_buckets[k] == 0) continue;
    const auto [lo, hi] = cli::LatencyBucketBounds(k);
    buckets.push_back(
        absl::StrFormat("[%d,%d) us: %d", lo, hi, p.latency_buckets[k]));
  }
  return buckets.empty() ? "no faults timed" : absl::StrJoin(buckets, "  ");
}

}  // namespace

std::string PostcopyLines(const PostcopyStats& p, bool destination) {
  std::string t;
  absl::StrAppendFormat(&t, "  post-copy        %s, urgent channel %s\n",
                        p.started ? "armed" : "not armed",
                        p.urgent_channel ? "on" : "off");
  if (!destination) {
    // The faults and their latency are the destination's, in its report.
    absl::StrAppendFormat(&t,
                          "  missing pages    %d (%s) at the switch: %d "
                          "requested by the destination's faults (%d answered "
                          "on the urgent channel), %d pushed on the bulk "
                          "channels\n",
                          p.missing_pages,
                          cli::FormatBytes(p.missing_pages * kPageSize),
                          p.requested_pages, p.urgent_pages, p.pushed_pages);
    absl::StrAppendFormat(&t,
                          "  post-copy time   switch %.1f ms, then %.1f ms "
                          "until every page was pushed and confirmed\n",
                          p.switch_ns * 1e-6, p.duration_ns * 1e-6);
    return t;
  }
  absl::StrAppendFormat(&t,
                        "  missing pages    %d (%s) at the switch: %d "
                        "requested, %d placed from urgent answers, %d "
                        "duplicates dropped\n",
                        p.missing_pages,
                        cli::FormatBytes(p.missing_pages * kPageSize),
                        p.requested_pages, p.urgent_pages, p.duplicate_pages);
  absl::StrAppendFormat(&t,
                        "  faults           %d timed (%d fault messages, %d "
                        "resolved locally as zero pages); latency p50 %d us, "
                        "p99 %d us, max %d us; blocked %.1f ms in all\n",
                        p.faults, p.fault_messages, p.local_zero_faults,
                        p.latency_p50_us, p.latency_p99_us, p.latency_max_us,
                        p.blocked_us * 1e-3);
  absl::StrAppendFormat(&t, "  fault latency    %s\n", HistogramLine(p));
  absl::StrAppendFormat(&t,
                        "  post-copy time   switch %.1f ms, then %.1f ms "
                        "until the last page was placed\n",
                        p.switch_ns * 1e-6, p.duration_ns * 1e-6);
  return t;
}

std::string SourceJson(const RunDescription& run, const PrecopyReport& r,
                       const std::string& destination_json) {
  cli::Json j = {{"role", "source"}};
  AddStatusFields(j, r.status);
  j["transport"] = run.transport;
  j["transport_reason"] = run.transport_reason;
  j["completion"] = run.completion;
  j["channels"] = run.channels;
  j["authenticated"] = run.authenticated;
  j["protect"] = run.protect;
  j["region_bytes"] = run.region_bytes;
  j["region"] = run.region;
  j["image"] = run.image;
  j["dirty_tracking"] = run.dirty_tracking;
  j["untracked_writers"] = run.untracked_writers;
  if (!run.attached.empty()) {
    j["attached"] = {{"process", run.attached},
                     {"pause_method", run.pause_method},
                     {"pause_note", run.pause_note},
                     {"pause_s", r.pause_s}};
  }
  j["workload"] = {{"dirty_set_bytes", run.dirty_set_bytes},
                   {"dirty_rate_bytes_per_s", run.dirty_rate_bytes_per_s},
                   {"writers", run.writers},
                   {"pages_written", r.workload_pages_written},
                   {"running_after", r.workload_running_after},
                   {"kept_paused", r.workload_kept_paused}};
  j["downtime_limit_s"] = run.downtime_limit_s;
  j["max_rounds"] = run.max_rounds;
  j["stall_rounds"] = run.stall_rounds;
  j["auto_converge"] = run.auto_converge;
  j["timeout_s"] = run.timeout_s;
  j["on_timeout"] = run.on_timeout;
  j["switchover"] = r.switchover;
  j["postcopy"] = SourcePostcopyJson(run, r);
  j["max_bandwidth_bytes_per_s"] = run.max_bandwidth;
  j["max_bandwidth_flag_bytes_per_s"] = run.max_bandwidth_flag;
  j["outcome"] = Outcome(r);
  j["destination_refused"] = r.destination_refused;
  j["total_s"] = r.total_s;
  j["cpu_s"] = r.cpu_s;
  j["prepare_s"] = r.prepare_s;
  j["setup_s"] = r.setup_s;
  j["transfer_s"] = r.transfer_s;
  j["verify_s"] = r.verify_s;
  j["downtime_s"] = r.downtime_s;
  j["downtime_final_collect_s"] = r.final_collect_s;
  j["downtime_final_round_s"] = r.final_round_s;
  j["downtime_final_probe_pages"] = r.final_probe_pages;
  j["downtime_if_verified_first_s"] = r.downtime_s + r.verify_s;
  j["collect_s"] = r.collect_s;
  j["verify_mode"] = run.verify_mode;
  j["rounds"] = r.rounds.size();
  j["converged_by"] = r.converged_by;
  j["estimated_downtime_s"] = r.estimated_downtime_s;
  j["switchover_estimate_s"] = r.switchover_estimate_s;
  j["switchovers_resumed"] = r.switchovers_resumed;
  j["resumed_stall_s"] = r.resumed_stall_s;
  j["downtime_over_limit"] = DowntimeOverLimit(run, r);
  j["link_bytes_per_s"] = r.link_bytes_per_s;
  j["round_trip_s"] = r.round_trip_s;
  j["stalled"] = r.stalled;
  j["lowest_remaining_bytes"] = r.lowest_remaining_bytes;
  j["throttle_percent"] = r.throttle_percent;
  j["dirty_rate_pages_per_s"] = r.dirty_pages_per_s;
  j["bytes_sent"] = r.bytes_sent;
  j["bytes_resent"] = r.bytes_resent;
  j["throughput_gb_per_s"] = Throughput(r);
  // The two figures apart: pages covered (as bytes_sent, the figure above)
  // and bytes that went on the wire, each with its rate.
  j["covered_bytes"] = r.bytes_sent;
  j["covered_gb_per_s"] = Throughput(r);
  j["wire_bytes"] = WireBytes(r);
  j["wire_gb_per_s"] = WireThroughput(r);
  cli::Json pages = cli::Json::array();
  cli::Json seconds = cli::Json::array();
  cli::Json remaining = cli::Json::array();
  cli::Json estimates = cli::Json::array();
  cli::Json throttles = cli::Json::array();
  cli::Json wire = cli::Json::array();
  cli::Json paused = cli::Json::array();
  for (const RoundRecord& rr : r.rounds) {
    pages.push_back(rr.pages);
    paused.push_back(rr.final);
    seconds.push_back(rr.seconds);
    wire.push_back(rr.wire_bytes);
    if (rr.final) continue;
    remaining.push_back(rr.remaining_bytes);
    estimates.push_back(rr.estimated_downtime_s);
    throttles.push_back(rr.throttle_percent);
  }
  j["pages_per_round"] = std::move(pages);
  j["round_seconds"] = std::move(seconds);
  j["wire_bytes_per_round"] = std::move(wire);
  // Which rounds went under the pause: the final round, its probe, and
  // the probes of switchovers that resumed the workload.
  j["paused_per_round"] = std::move(paused);
  // Per live round, once its dirty pages were collected.
  j["remaining_bytes_per_round"] = std::move(remaining);
  j["estimated_downtime_per_round_s"] = std::move(estimates);
  j["throttle_percent_per_round"] = std::move(throttles);
  j["confirmed_rounds"] = r.confirmed_rounds;
  j["pages_verified"] = r.pages_verified;
  j["pages_mismatched"] = r.pages_mismatched;
  j["verified"] = r.verified;
  j["resent_pages"] = r.stats.resent_pages;
  AddZeroFields(j, r.stats.Total());
  j["delta"] = cli::DeltaJson(r.stats.Total(), kPageSize);
  j["channels_lost"] = cli::ChannelLossesJson(r.stats);
  j["links"] = LinksJson(run, r);
  j["channel_stats"] = cli::ChannelArrayJson(r.stats);
  if (!destination_json.empty()) {
    j["destination"] = cli::ParseForeignJson(destination_json);
  }
  return cli::DumpJson(j);
}

namespace {

// What moved, how, and why this transport.
void AppendHeadline(const RunDescription& run, const PrecopyReport& r,
                    std::string& t) {
  absl::StrAppendFormat(
      &t, "ramferry-migrate: %s, %s over %d %s channel%s (%s tracking, %s)\n",
      r.status.ok() ? "migrated" : (r.cancelled ? "CANCELLED" : "FAILED"),
      cli::FormatBytes(run.region_bytes), run.channels, run.transport,
      run.channels == 1 ? "" : "s", run.dirty_tracking,
      run.authenticated
          ? absl::StrCat("authenticated, stream protect=", run.protect)
          : "UNAUTHENTICATED");
  if (!run.transport_reason.empty()) {
    absl::StrAppendFormat(&t, "  transport        %s\n", run.transport_reason);
  }
}

// Why it failed, what the destination holds, and where the workload is.
void AppendFailure(const RunDescription& run, const PrecopyReport& r,
                   std::string& t) {
  if (!r.status.ok()) {
    absl::StrAppendFormat(&t, "  error            %s\n", r.status.ToString());
    if (r.outcome_unknown) {
      t += "  outcome          UNKNOWN: the failure came after FINISH went "
           "out, so the destination may be running the memory; the "
           "workload is kept paused here (resume it only once the "
           "destination is known not to run)\n";
    }
    if (r.destination_refused) {
      t += "  outcome          NOT COMMITTED: the destination refused to "
           "commit (FINISH or the switch; the error says why) and discards "
           "what it received; the workload resumed here\n";
    }
    absl::StrAppendFormat(&t,
                          "  confirmed rounds %d (the destination applied "
                          "these in full)\n",
                          r.confirmed_rounds);
    absl::StrAppendFormat(
        &t, "  workload         %s\n",
        r.workload_running_after
            ? (run.attached.empty() ? "still running on the source"
                                    : "resumed on the source")
        : !run.attached.empty()
            ? "not running on the source (paused, stopped or gone)"
        : run.untracked_writers.empty()
            ? "not writing"
            : absl::StrCat("memload paused; untracked: other processes map "
                           "the file (",
                           run.untracked_writers, ")"));
  }
}

// Another process's memory: how it was paused; writers the tracking cannot see.
void AppendAttachment(const RunDescription& run, const PrecopyReport& r,
                      std::string& t) {
  if (!run.attached.empty() && run.pause_method.empty()) {
    absl::StrAppendFormat(&t, "  attached         %s; never paused\n",
                          run.attached);
  } else if (!run.attached.empty()) {
    absl::StrAppendFormat(
        &t, "  attached         %s; paused by %s in %.1f ms%s\n", run.attached,
        run.pause_method == "handler" ? "its handler" : run.pause_method,
        r.pause_s * 1e3,
        run.pause_note.empty() ? "" : absl::StrCat(" (", run.pause_note, ")"));
  }
  if (!run.untracked_writers.empty()) {
    absl::StrAppendFormat(
        &t,
        "  UNTRACKED        other processes map the file (%s): their writes "
        "are invisible to the dirty tracking; only verification checks "
        "them\n",
        run.untracked_writers);
  }
}

// Where the time went: set-up, transfer, downtime and verification.
void AppendTimes(const RunDescription& run, const PrecopyReport& r,
                 std::string& t) {
  const bool postcopy = r.switchover == "postcopy";
  absl::StrAppendFormat(&t, "  total            %.3f s\n", r.total_s);
  absl::StrAppendFormat(&t,
                        "  prepare          %.3f s (map the memory, arm the "
                        "tracking; before the total)\n",
                        r.prepare_s);
  absl::StrAppendFormat(&t, "  setup            %.3f s\n", r.setup_s);
  absl::StrAppendFormat(&t, "  transfer phase   %.3f s\n", r.transfer_s);
  absl::StrAppendFormat(&t,
                        "  throughput       %s of pages covered, "
                        "%s on the wire (%s)\n",
                        cli::FormatRate(Throughput(r) * 1e9),
                        cli::FormatRate(WireThroughput(r) * 1e9),
                        cli::FormatBytes(WireBytes(r)));
  if (postcopy) {
    absl::StrAppendFormat(
        &t,
        "  downtime         %.1f ms%s (workload paused -> "
        "destination armed; stop-and-copy was estimated "
        "at %.1f ms, limit %.0f ms): last collect %.1f ms, "
        "switch %.1f ms\n",
        r.downtime_s * 1e3, OverLimitNote(run, r), r.estimated_downtime_s * 1e3,
        run.downtime_limit_s * 1e3, r.final_collect_s * 1e3, r.switch_s * 1e3);
  } else {
    absl::StrAppendFormat(
        &t,
        "  downtime         %.1f ms%s (estimated %.1f ms before the "
        "pause, %.1f ms once paused; limit %.0f ms): pause and last "
        "collect %.1f ms, final round %.1f ms (predicted %.1f ms%s)\n",
        r.downtime_s * 1e3, OverLimitNote(run, r), r.estimated_downtime_s * 1e3,
        r.switchover_estimate_s * 1e3, run.downtime_limit_s * 1e3,
        r.final_collect_s * 1e3, r.final_round_s * 1e3,
        std::max(0.0, r.switchover_estimate_s - r.final_collect_s) * 1e3,
        r.final_probe_pages == 0
            ? ""
            : absl::StrFormat(", once its first %d pages went",
                              r.final_probe_pages));
  }
  if (r.switchovers_resumed > 0) {
    absl::StrAppendFormat(&t,
                          "  given up         %d stop-and-copy attempt(s): "
                          "paused, the final round would not have fit the "
                          "limit, so the workload resumed (stalled %.1f "
                          "ms in all)\n",
                          r.switchovers_resumed, r.resumed_stall_s * 1e3);
  }
  if (run.max_bandwidth != 0 || run.max_bandwidth_flag != 0) {
    const auto cap = [](uint64_t b) {
      return b == 0 ? std::string("none") : cli::FormatBytes(b) + "/s";
    };
    absl::StrAppendFormat(
        &t, "  bandwidth cap    %s over all channels%s\n",
        cap(run.max_bandwidth),
        run.max_bandwidth == run.max_bandwidth_flag
            ? ""
            : absl::StrCat(" (set by a control client; ",
                           cap(run.max_bandwidth_flag), " at the start)"));
  }
  if (postcopy) {
    // The destination runs already: nothing waits for the check but the
    // session's end.
    absl::StrAppendFormat(&t,
                          "  verification     %s, %.1f ms once the "
                          "destination held every page\n",
                          run.verify_mode, r.verify_s * 1e3);
  } else {
    absl::StrAppendFormat(&t,
                          "  verification     %s, %.1f ms after the "
                          "switchover (source paused; a destination that "
                          "waits for it resumes at %.1f ms)\n",
                          run.verify_mode, r.verify_s * 1e3,
                          (r.downtime_s + r.verify_s) * 1e3);
  }
}

// The rounds: how many, what stopped them, what each carried, and the check.
void AppendRounds(const RunDescription& run, const PrecopyReport& r,
                  std::string& t) {
  absl::StrAppendFormat(
      &t, "  rounds           %d (stopped by %s%s)\n", r.rounds.size(),
      r.converged_by.empty() ? "-" : r.converged_by,
      r.stalled ? absl::StrCat("; stalled, lowest dirty ",
                               cli::FormatBytes(r.lowest_remaining_bytes))
                : "");
  if (run.auto_converge) {
    std::vector<std::string> throttles;
    for (const RoundRecord& rr : r.rounds) {
      if (!rr.final) throttles.push_back(absl::StrCat(rr.throttle_percent));
    }
    absl::StrAppendFormat(&t,
                          "  throttle %%       %s  (auto-converge, per "
                          "live round)\n",
                          absl::StrJoin(throttles, " "));
  }
  std::vector<std::string> pages;
  bool paused_round = false;
  for (const RoundRecord& rr : r.rounds) {
    pages.push_back(absl::StrCat(rr.pages, rr.final ? "*" : ""));
    paused_round |= rr.final;
  }
  // The legend only where a round carries the mark (post-copy has none).
  absl::StrAppendFormat(&t, "  pages per round  %s%s\n",
                        absl::StrJoin(pages, " "),
                        paused_round ? "  (* = workload paused)" : "");
  absl::StrAppendFormat(&t, "  sent / re-sent   %s / %s\n",
                        cli::FormatBytes(r.bytes_sent),
                        cli::FormatBytes(r.bytes_resent));
  absl::StrAppendFormat(&t, "  memory image     %s\n", run.image);
  absl::StrAppendFormat(&t, "  zero pages       %s\n",
                        ZeroLine(r.stats.Total()));
  absl::StrAppendFormat(&t, "  deltas           %s\n",
                        cli::DeltaLine(r.stats.Total(), kPageSize));
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
}

// Post-copy: whether the session switched, and what followed.
void AppendSwitchover(const RunDescription& run, const PrecopyReport& r,
                      std::string& t) {
  const bool postcopy = r.switchover == "postcopy";
  if (run.postcopy != "off") {
    absl::StrAppendFormat(
        &t, "  switchover       %s (--postcopy=%s%s)\n",
        r.switchover.empty() ? "none" : r.switchover, run.postcopy,
        postcopy ? absl::StrFormat("; %d pages missing at the switch, then "
                                   "%.1f ms until the destination held "
                                   "every page",
                                   r.postcopy_missing_pages, r.postcopy_s * 1e3)
                 : "");
    if (postcopy) t += PostcopyLines(r.stats.postcopy, /*destination=*/false);
    if (!r.postcopy_cut_error.empty()) {
      absl::StrAppendFormat(&t,
                            "  resumed          %d times (the figures above "
                            "are the last session's); last cut: %s\n",
                            r.postcopy_resumes, r.postcopy_cut_error);
    }
    if (r.workload_kept_paused) {
      t += "  workload         kept paused on the source: post-copy failed "
           "after the switch began, so this memory is the state at the "
           "switch\n";
    }
  }
}

// Each link where there are several, then each channel.
void AppendLinksAndChannels(const RunDescription& run, const PrecopyReport& r,
                            std::string& t) {
  // One link needs no line of its own: the throughput above is its.
  if (std::vector<cli::LinkSummary> links =
          cli::SummarizeLinks(r.stats, r.transfer_s);
      links.size() > 1 || !run.link_rates.empty()) {
    for (cli::LinkSummary& l : links) {
      if (std::string rate = LinkRate(run, l.endpoint); !rate.empty()) {
        l.endpoint = absl::StrCat(l.endpoint, " (", rate, ")");
      }
    }
    t += cli::LinksTable(links);
  }
  t += "  channel  packets   pages     send calls  zc sent/done/copied  "
       "flushes  wait ms\n";
  for (const ChannelStats& c : r.stats.channels) {
    absl::StrAppendFormat(
        &t, "  %-7d  %-8d  %-8d  %-10d  %-19s  %-7d  %.1f\n", c.channel,
        c.packets, c.pages, c.send_calls,
        absl::StrFormat("%d/%d/%d", c.zc_sends, c.zc_completions, c.zc_copied),
        c.flushes, c.completion_wait_ns * 1e-6);
  }
}

}  // namespace

std::string SourceTable(const RunDescription& run, const PrecopyReport& r) {
  std::string t;
  AppendHeadline(run, r, t);
  AppendFailure(run, r, t);
  AppendAttachment(run, r, t);
  AppendTimes(run, r, t);
  AppendRounds(run, r, t);
  AppendSwitchover(run, r, t);
  AppendLinksAndChannels(run, r, t);
  return t;
}

std::string DestinationJson(const DestinationReport& r) {
  cli::Json j = {{"role", "destination"}};
  AddStatusFields(j, r.status);
  j["prefault"] = PrefaultName(r.prefault);
  j["prefault_s"] = r.prefault_s;
  j["prefault_bytes"] = r.prefault_bytes;
  j["page_faults"] = r.page_faults;
  j["serve_s"] = r.serve_s;
  j["cpu_s"] = r.cpu_s;
  j["rounds_applied"] = r.rounds_applied;
  j["pages_verified"] = r.pages_verified;
  j["verified"] = r.verified;
  j["connections_refused"] = r.stats.connections_refused;
  j["auth_failures"] = r.stats.auth_failures;
  j["sessions_abandoned"] = r.stats.sessions_abandoned;
  j["last_abandoned"] = r.stats.last_abandoned;
  AddZeroFields(j, r.stats.Total());
  j["channels_lost"] = cli::ChannelLossesJson(r.stats);
  cli::Json postcopy = cli::PostcopyStatsJson(r.stats.postcopy);
  postcopy["allowed"] = r.postcopy_allowed;
  postcopy["armed"] = r.postcopy_armed;
  postcopy["workload"] = r.workload;
  postcopy["workload_pages_written"] = r.workload_pages_written;
  postcopy["workload_s"] = r.workload_s;
  postcopy["released_pages"] = r.released_pages;
  j["postcopy"] = std::move(postcopy);
  if (!r.exported_to.empty()) {
    j["export"] = {{"socket", r.exported_to},
                   {"handed_over", r.handed_over},
                   {"handover_s", r.handover_s}};
  }
  j["channel_stats"] = cli::ChannelArrayJson(r.stats);
  return cli::DumpJson(j);
}

std::string DestinationTable(const DestinationReport& r) {
  std::string postcopy;
  if (r.postcopy_armed) {
    postcopy = absl::StrCat(
        absl::StrFormat(
            "\n  workload         %s\n",
            r.workload ? absl::StrFormat("memload wrote %d pages here in "
                                         "%.2f s after the switch",
                                         r.workload_pages_written, r.workload_s)
                       : std::string("none ran here")),
        PostcopyLines(r.stats.postcopy, /*destination=*/true));
    if (r.released_pages > 0) {
      absl::StrAppendFormat(&postcopy,
                            "  released         %d awaited pages filled with "
                            "zeros after the source was lost: this memory is "
                            "not the source's\n",
                            r.released_pages);
    }
    postcopy.pop_back();  // the table's own newline ends it
  } else if (r.postcopy_allowed) {
    postcopy = "; post-copy allowed, not used";
  }
  return absl::StrFormat(
      "destination: %s; %d rounds applied, %d pages verified by the "
      "source, pre-fault %s %.2f s (%s), %d page faults, served %.2f s, CPU "
      "%.2f s; %d connections refused (%d failed authentication), %d "
      "sessions given up before they started%s; zero "
      "pages: %d written, the rest already read as zero%s%s%s%s\n",
      r.status.ok() ? "done" : "FAILED", r.rounds_applied, r.pages_verified,
      PrefaultName(r.prefault), r.prefault_s,
      cli::FormatBytes(r.prefault_bytes), r.page_faults, r.serve_s, r.cpu_s,
      r.stats.connections_refused, r.stats.auth_failures,
      r.stats.sessions_abandoned,
      r.stats.last_abandoned.empty()
          ? ""
          : absl::StrCat(" (last: ", r.stats.last_abandoned, ")"),
      r.stats.Total().zero_pages_written,
      r.stats.channels_lost.empty()
          ? ""
          : absl::StrCat("\n  channels lost: ",
                         DescribeChannelLosses(r.stats.channels_lost)),
      r.status.ok() ? "" : absl::StrCat("\n  error: ", r.status.ToString()),
      r.handed_over ? absl::StrFormat("\n  handed over to %s in %.1f ms",
                                      r.exported_to, r.handover_s * 1e3)
                    : "",
      postcopy);
}

}  // namespace ramferry::migrate
