// ramferry-migrate: live migration of changing memory between two
// processes, over ramferry's channels: pre-copy rounds, then stop-and-copy
// or post-copy.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <system_error>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ramferry/memory_handoff.h"
#include "ramferry/pinning.h"
#include "ramferry/region.h"
#include "tools/common/auth_flags.h"
#include "tools/common/channel_flags.h"
#include "tools/common/cli.h"
#include "tools/common/endpoints.h"
#include "tools/common/fork_with_pipe.h"
#include "tools/common/link_testbed.h"
#include "tools/migrate/attached_workload.h"
#include "tools/migrate/destination.h"
#include "tools/migrate/dirty_tracker.h"
#include "tools/migrate/file_mappers.h"
#include "tools/migrate/memload.h"
#include "tools/migrate/memory_image.h"
#include "tools/migrate/postcopy_mode.h"
#include "tools/migrate/precopy.h"
#include "tools/migrate/region_memory.h"
#include "tools/migrate/report.h"

namespace ramferry::migrate {

// A dirty rate: "256MiB" (bytes per second), "50000pages" (per second) or
// "auto": 256 MiB/s into anonymous memory, nothing into a --region-file,
// which may be another program's memory.
struct DirtyRate {
  double pages_per_s = -1;  // -1: auto
};
constexpr double kAutoRatePagesPerS = (256 << 20) / double{kPageSize};

bool AbslParseFlag(absl::string_view text, DirtyRate* out, std::string* err) {
  if (text == "auto") {
    out->pages_per_s = -1;
    return true;
  }
  if (absl::EndsWith(text, "pages")) {
    double v;
    if (!absl::SimpleAtod(text.substr(0, text.size() - 5), &v) || v < 0) {
      *err = "want NNNpages (per second)";
      return false;
    }
    out->pages_per_s = v;
    return true;
  }
  absl::StatusOr<uint64_t> b = cli::ParseBytes(text);
  if (!b.ok()) {
    *err = std::string(b.status().message());
    return false;
  }
  out->pages_per_s = *b / double{kPageSize};
  return true;
}
std::string AbslUnparseFlag(DirtyRate r) {
  if (r.pages_per_s < 0) return "auto";
  return cli::FormatBytes(static_cast<uint64_t>(r.pages_per_s * kPageSize));
}

// --size: one region's size, or a comma list of sizes, one region each
// (a destination for an attached workload that exports several).
struct RegionSizes {
  std::vector<uint64_t> bytes;
};

bool AbslParseFlag(absl::string_view text, RegionSizes* out, std::string* err) {
  RegionSizes sizes;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    absl::StatusOr<uint64_t> b = cli::ParseBytes(part);
    if (!b.ok()) {
      *err = std::string(b.status().message());
      return false;
    }
    sizes.bytes.push_back(*b);
  }
  *out = std::move(sizes);
  return true;
}
std::string AbslUnparseFlag(const RegionSizes& sizes) {
  std::vector<std::string> parts;
  for (uint64_t b : sizes.bytes) {
    // Exact, as the flag is read back: "1GiB", or the bytes where a short
    // form rounds.
    const std::string shortform = cli::FormatBytes(b);
    const absl::StatusOr<uint64_t> back = cli::ParseBytes(shortform);
    parts.push_back(back.ok() && *back == b ? shortform : absl::StrCat(b));
  }
  return absl::StrJoin(parts, ",");
}

// The session's region i: "ram", "ram2", ... on both ends.
std::string RegionName(size_t i) {
  return i == 0 ? "ram" : absl::StrCat("ram", i + 1);
}

}  // namespace ramferry::migrate

ABSL_FLAG(std::string, role, "",
          "source | dest (or use --demo to run both on loopback)");
ABSL_FLAG(std::string, connect, "",
          "source: destination HOST:PORT, or a comma list A:P,B:P of the "
          "destination's addresses on several links: the data channels "
          "spread over all of them (channel i to item i % count), the "
          "control connection goes to the first");
ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "dest: HOST:PORT to listen on");
ABSL_FLAG(bool, demo, false,
          "run a destination process and a source on loopback, one report");
ABSL_FLAG(std::string, demo_host, "127.0.0.1",
          "--demo: the local address both ends use (rdma: an address of the "
          "RDMA device's netdev, e.g. a Soft-RoCE one's; loopback has none)");
ABSL_FLAG(std::string, demo_link, "",
          "--demo: run over real rate-limited links instead of loopback, one "
          "per rate in tc syntax (1gbit; 500mbit,500mbit): two network "
          "namespaces joined by veth pairs under tc tbf, made for the run "
          "and deleted after it (root). The destination listens on all "
          "links, the source spreads its channels over them; each link is "
          "described on stderr");
ABSL_FLAG(std::string, transport, "tcp",
          "tcp | tcp-zerocopy | uring-zc | rdma | auto (source: chosen for "
          "the destination's address, and why printed; the destination "
          "follows the source)");
ABSL_FLAG(ramferry::migrate::RegionSizes, size,
          ramferry::migrate::RegionSizes{{1ull << 30}},
          "region size (anonymous memory; for dest also the file size); "
          "dest: a comma list (1GiB,2GiB) makes one region per size, as an "
          "attached workload exporting several regions needs");
ABSL_FLAG(std::string, region_file, "",
          "migrate a shared file mapping instead (e.g. /dev/shm/vm-ram): "
          "the source maps the existing file, dest creates it. memload does "
          "not write into it unless --dirty-rate is given");
ABSL_FLAG(std::string, dest_region_file, "",
          "--demo with --region-file: the destination's file (default: the "
          "source's path + \".dest\")");
ABSL_FLAG(std::string, dirty_tracking, "uffd",
          "uffd (userfaultfd write-protect + PAGEMAP_SCAN, Linux 6.7+) | "
          "bitmap (the workload marks its own writes)");
ABSL_FLAG(ramferry::cli::ByteSize, dirty_set, ramferry::cli::ByteSize{64 << 20},
          "memload: size of the page set the writers keep rewriting");
ABSL_FLAG(ramferry::migrate::DirtyRate, dirty_rate,
          ramferry::migrate::DirtyRate{},
          "memload: writes per second over all writers, as bytes (256MiB) "
          "or pages (50000pages); 0 for an idle workload; auto: 256MiB into "
          "anonymous memory, 0 into a --region-file");
ABSL_FLAG(int, writers, 1, "memload writer threads");
ABSL_FLAG(absl::Duration, downtime_limit, absl::Milliseconds(300),
          "stop and copy once the final round is estimated to fit in this");
ABSL_FLAG(uint32_t, max_rounds, 30,
          "live rounds (round 0 included) before stopping regardless");
ABSL_FLAG(uint32_t, stall_rounds, 5,
          "stall detection: after this many live rounds with no new low in "
          "the dirty bytes (by 5%), stop at the next round that comes back "
          "to the lowest point seen (or this many rounds later); 0: off");
ABSL_FLAG(bool, auto_converge, false,
          "throttle the workload (memload's writers) in steps, 20% then "
          "10% more every two rounds up to 99%, while it dirties more than "
          "half of what the link carries and the final round does not fit");
ABSL_FLAG(absl::Duration, timeout, absl::InfiniteDuration(),
          "source: give the live rounds this long from the first round's "
          "start, then act as --on-timeout says (inf: no timeout)");
ABSL_FLAG(std::string, on_timeout, "",
          "source, with --timeout: cancel (the default without --postcopy: "
          "stop at once, even mid-round; "
          "the source keeps running and the destination discards what it "
          "received), force (stop and copy after the round in flight, "
          "whatever the downtime) or postcopy (switch to post-copy after "
          "the round in flight; the default with --postcopy=on or auto)");
ABSL_FLAG(std::string, postcopy, "off",
          "post-copy, on both ends (--postcopy alone: on): on (when the "
          "live rounds end, switch instead of the stop-and-copy round: the "
          "source's workload stops for good, the destination resumes it at "
          "once and its missing pages fault in from the source or are "
          "pushed), now (switch before any round: every page missing), "
          "auto (stop-and-copy when the final round is estimated to fit "
          "--downtime-limit, post-copy when pre-copy does not converge: "
          "stall, --max-rounds, --timeout), off. The destination needs "
          "private anonymous memory (no --region-file) and runs memload "
          "from the switch at --dirty-rate over --dirty-set. Not with "
          "--transport=rdma nor --survive-channel-loss");
ABSL_FLAG(std::string, postcopy_urgent, "on",
          "post-copy: on (page requests and their answers have a connection "
          "of their own, never queued behind pushed pages) or off (requests "
          "ride the control connection and are answered on the bulk "
          "channels, behind what is queued there)");
ABSL_FLAG(absl::Duration, postcopy_resume_timeout, absl::ZeroDuration(),
          "post-copy, both ends: when the session is cut after the switch "
          "(a link down, a stalled peer), the destination keeps its "
          "workload blocked and waits this long for the source, which "
          "keeps trying to resume post-copy where it stood; 0: a cut "
          "post-copy fails at once");
ABSL_FLAG(ramferry::cli::ByteRate, max_bandwidth, ramferry::cli::ByteRate{},
          "source: the most all channels together send per second, as bits "
          "(1gbit, 500mbit) or bytes (100MB); 0: no limit");
ABSL_FLAG(std::string, prefault, "auto",
          "dest: fault the region in ahead of the data: before (all of it, on "
          "every core, before listening), during (one background thread "
          "from the first page on, while the data arrives), idle (that thread "
          "only until the first "
          "page arrives), off, or auto: during for anonymous memory (which "
          "also gets huge pages), off for a file, whose pages are written "
          "through it and never through this process's page tables (chosen "
          "by measurement, see the README); true/false mean before/off");
ABSL_FLAG(std::string, verify, "full",
          "source: after the final round, check the destination page by "
          "page: full (the source's memory now against a digest the "
          "destination took of each page as it landed; catches a write the "
          "dirty tracking missed), sent (what each page's last send carried "
          "against what landed; reads no memory), off");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(10),
          "source: keep retrying the connection this long");
ABSL_FLAG(absl::Duration, stall_timeout, absl::Seconds(30),
          "either end: no progress this long means the peer is stalled");
ABSL_FLAG(bool, survive_channel_loss, false,
          "source: when a data channel dies and others live, re-send its "
          "unconfirmed pages on the others and carry on (the report says "
          "which channel was lost); off: a dead channel ends the migration");
ABSL_FLAG(uint64_t, seed, 1, "seed for the region's random content");
ABSL_FLAG(std::string, image, "random",
          "memload: what the source's anonymous memory holds, as percent of "
          "pages per kind, in runs of 1-512 pages: zero (written zeros), "
          "untouched (never faulted in), text (compressible words), random; "
          "e.g. zero=60,untouched=10,text=10,random=20");
ABSL_FLAG(std::string, make_image, "",
          "write a file of --size holding --image (untouched pages are "
          "holes) with --seed, print what it holds, and exit: the data file "
          "for a --region-file run or bench/compare --qemu");
ABSL_FLAG(bool, json, false, "print the report as JSON; no progress line");
ABSL_FLAG(bool, allow_foreign_writers, false,
          "source: migrate a --region-file that other processes map. Their "
          "writes are invisible to the dirty tracking (userfaultfd "
          "write-protection is per address space), so the result is right "
          "only if they do not write; without this flag such a file is "
          "refused");
ABSL_FLAG(std::string, attach, "",
          "source: migrate the memory another process exported on this unix "
          "socket (ramferry_export_listen / MemoryExport): its memfd or "
          "shared-file region, mapped here, its writes read from its own "
          "pagemap, paused by its handler (or SIGSTOP) for the final round "
          "and told when it migrated. Instead of --size, --region-file and "
          "memload");
ABSL_FLAG(absl::Duration, attach_pause_timeout, absl::Seconds(1),
          "--attach: how long the workload's handler may take to pause "
          "before the process is stopped with SIGSTOP instead");
ABSL_FLAG(std::string, export, "",
          "dest: receive into a fresh memfd of --size (or the "
          "--region-file) and, once migrated, hand it to the process "
          "waiting on this unix socket (ramferry_adopt_listen / "
          "AdoptedMemory), which maps it and runs on");
ABSL_FLAG(absl::Duration, export_timeout, absl::Seconds(30),
          "--export: how long to wait for the adopting process");
ABSL_FLAG(bool, allow_unauthenticated, false,
          "--demo: run both ends without a key instead of the fresh one the "
          "demo makes (anything that reaches the port can write into the "
          "destination's memory meanwhile)");

namespace ramferry::migrate {
namespace {

int Usage(const std::string& why) {
  std::fprintf(stderr, "ramferry-migrate: %s (see --help)\n", why.c_str());
  return 2;
}

bool AutoTransport() { return absl::GetFlag(FLAGS_transport) == "auto"; }

absl::StatusOr<SessionOptions> Session() {
  SessionOptions o;
  // auto: tcp until the source knows where it connects (ChooseFor).
  absl::StatusOr<TransportKind> t =
      AutoTransport() ? TransportKind::kTcp
                      : ParseTransportKind(absl::GetFlag(FLAGS_transport));
  if (!t.ok()) return t.status();
  o.transport = *t;
  if (absl::Status s = cli::ApplyChannelFlags(&o); !s.ok()) return s;
  o.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  o.stall_timeout = absl::GetFlag(FLAGS_stall_timeout);
  o.survive_channel_loss = absl::GetFlag(FLAGS_survive_channel_loss);
  o.max_bandwidth = absl::GetFlag(FLAGS_max_bandwidth).bytes_per_s;
  absl::StatusOr<PostcopyMode> postcopy =
      ParsePostcopyMode(absl::GetFlag(FLAGS_postcopy));
  if (!postcopy.ok()) return postcopy.status();
  o.postcopy = *postcopy != PostcopyMode::kOff;
  absl::StatusOr<bool> urgent =
      ParseOnOff("postcopy-urgent", absl::GetFlag(FLAGS_postcopy_urgent));
  if (!urgent.ok()) return urgent.status();
  o.postcopy_urgent_channel = *urgent;
  o.postcopy_resume_timeout = absl::GetFlag(FLAGS_postcopy_resume_timeout);
  if (o.postcopy_resume_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--postcopy-resume-timeout must not be negative");
  }
  const std::string verify = absl::GetFlag(FLAGS_verify);
  if (verify == "full") {
    o.verify = VerifyMode::kFull;
  } else if (verify == "sent") {
    o.verify = VerifyMode::kSent;
  } else if (verify == "off") {
    // Nothing recorded and Verify not called; post-copy refuses kReread
    // (the destination's workload writes before a Verify could re-read),
    // so it records the destination's digests it will not use.
    o.verify = o.postcopy ? VerifyMode::kFull : VerifyMode::kReread;
  } else {
    return absl::InvalidArgumentError(
        "--verify must be full, sent or off, not '" + verify + "'");
  }
  if (absl::Status s = cli::ApplyAuthFlags(&o); !s.ok()) return s;
  // --demo starts both ends: a key only they hold authenticates them,
  // unless asked to run without one.
  if (absl::GetFlag(FLAGS_demo) && o.auth_key.empty() && !o.insecure) {
    if (absl::GetFlag(FLAGS_allow_unauthenticated)) {
      o.insecure = true;
    } else {
      o.auth_key = cli::EphemeralAuthKey();
    }
  }
  if (absl::Status s = ValidateOptions(o); !s.ok()) return s;
  return o;
}

PostcopyMode PostcopyFlag() {
  // Checked by Session() before any run.
  return ParsePostcopyMode(absl::GetFlag(FLAGS_postcopy))
      .value_or(PostcopyMode::kOff);
}

// --on-timeout, whose default ("") follows --postcopy.
absl::StatusOr<TimeoutAction> TimeoutActionFlag() {
  return ParseTimeoutAction(absl::GetFlag(FLAGS_on_timeout), PostcopyFlag());
}

// What the flags allow of post-copy, checked before either end starts
// (the engine checks the rest: the destination's memory, the peer's
// consent). `receives`: this process runs a destination (dest, --demo).
absl::Status CheckPostcopy(bool receives) {
  absl::StatusOr<TimeoutAction> on = TimeoutActionFlag();
  if (!on.ok()) return on.status();
  PostcopyFlagCheck c;
  c.mode = PostcopyFlag();
  c.on_timeout = *on;
  c.transport = absl::GetFlag(FLAGS_transport);
  c.survive_channel_loss = absl::GetFlag(FLAGS_survive_channel_loss);
  c.region_file = absl::GetFlag(FLAGS_region_file);
  c.export_to = absl::GetFlag(FLAGS_export);
  c.destination = receives;
  c.prefault = absl::GetFlag(FLAGS_prefault);
  c.urgent = absl::GetFlag(FLAGS_postcopy_urgent);
  return CheckPostcopyFlags(c);
}

// --attach and --export: which role takes which, and what they replace.
absl::Status CheckHandoffFlags(const std::string& role) {
  const bool demo = absl::GetFlag(FLAGS_demo);
  if (!absl::GetFlag(FLAGS_attach).empty()) {
    if (!demo && role != "source") {
      return absl::InvalidArgumentError("--attach is the source's");
    }
    if (!absl::GetFlag(FLAGS_region_file).empty()) {
      return absl::InvalidArgumentError(
          "--attach migrates the exported memory: drop --region-file");
    }
    if (absl::GetFlag(FLAGS_dirty_tracking) != "uffd") {
      return absl::InvalidArgumentError(
          "--attach tracks the workload's writes with its userfaultfd "
          "registration: drop --dirty-tracking");
    }
    if (absl::GetFlag(FLAGS_auto_converge)) {
      return absl::InvalidArgumentError(
          "--auto-converge throttles memload's writers; an attached "
          "workload's are its own: drop one of them");
    }
  }
  if (!absl::GetFlag(FLAGS_export).empty() && !demo && role != "dest") {
    return absl::InvalidArgumentError("--export is the destination's");
  }
  return absl::OkStatus();
}

absl::StatusOr<ConvergenceConfig> Convergence() {
  ConvergenceConfig c;
  c.downtime_limit = absl::GetFlag(FLAGS_downtime_limit);
  c.max_rounds = absl::GetFlag(FLAGS_max_rounds);
  c.stall_rounds = absl::GetFlag(FLAGS_stall_rounds);
  c.auto_converge = absl::GetFlag(FLAGS_auto_converge);
  c.timeout = absl::GetFlag(FLAGS_timeout);
  if (c.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--timeout must be positive (or inf)");
  }
  absl::StatusOr<TimeoutAction> on = TimeoutActionFlag();
  if (!on.ok()) return on.status();
  switch (*on) {
    case TimeoutAction::kCancel:
      c.on_timeout = OnTimeout::kCancel;
      break;
    case TimeoutAction::kForce:
      c.on_timeout = OnTimeout::kForce;
      break;
    case TimeoutAction::kPostcopy:
      c.on_timeout = OnTimeout::kPostcopy;
      break;
  }
  // auto: the policy switches where no final round fits (on switches
  // wherever the rounds end: ChooseSwitchover).
  c.postcopy = PostcopyFlag() == PostcopyMode::kAuto;
  return c;
}

double DirtyPagesPerSecond(bool file_backed) {
  const double rate = absl::GetFlag(FLAGS_dirty_rate).pages_per_s;
  if (rate >= 0) return rate;
  return file_backed ? 0 : kAutoRatePagesPerS;
}

RunDescription Describe(const SessionOptions& o, uint64_t bytes,
                        absl::string_view tracking) {
  RunDescription d;
  d.transport = std::string(TransportKindName(o.transport));
  d.completion = std::string(CompletionPolicyName(o.completion));
  d.channels = o.channels;
  d.region_bytes = bytes;
  d.region = absl::GetFlag(FLAGS_region_file).empty()
                 ? "anonymous"
                 : absl::GetFlag(FLAGS_region_file);
  d.dirty_tracking = std::string(tracking);
  d.dirty_set_bytes = absl::GetFlag(FLAGS_dirty_set).bytes;
  d.dirty_rate_bytes_per_s =
      DirtyPagesPerSecond(d.region != "anonymous") * kPageSize;
  d.writers = absl::GetFlag(FLAGS_writers);
  d.downtime_limit_s =
      absl::ToDoubleSeconds(absl::GetFlag(FLAGS_downtime_limit));
  d.max_rounds = absl::GetFlag(FLAGS_max_rounds);
  d.stall_rounds = absl::GetFlag(FLAGS_stall_rounds);
  d.auto_converge = absl::GetFlag(FLAGS_auto_converge);
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  d.timeout_s =
      timeout == absl::InfiniteDuration() ? 0 : absl::ToDoubleSeconds(timeout);
  d.on_timeout =
      TimeoutActionName(TimeoutActionFlag().value_or(TimeoutAction::kCancel));
  d.postcopy = PostcopyModeName(PostcopyFlag());
  d.postcopy_urgent = o.postcopy_urgent_channel;
  d.max_bandwidth = o.max_bandwidth;
  d.authenticated = !o.auth_key.empty();
  d.protect = ProtectionName(ResolvedProtection(o));
  d.verify_mode = absl::GetFlag(FLAGS_verify);
  d.image = d.region == "anonymous" ? absl::GetFlag(FLAGS_image) : "the file's";
  return d;
}

// The destination's own report, when it runs as our child (--demo).
struct PeerReport {
  std::string json;
  std::string table;
};
using FetchPeerReport = std::function<PeerReport()>;

// --transport=auto: the transport for opt->host, and why (empty when the
// transport was named).
absl::StatusOr<std::string> ChooseFor(SessionOptions* opt) {
  if (!AutoTransport()) return std::string();
  return cli::ChooseTransportFor(opt->host, "ramferry-migrate", opt);
}

// What the source migrates and what writes it: its own memory under
// memload, or the memory another process exported (--attach).
struct SourceMemory {
  std::unique_ptr<RegionMemory> own;
  std::unique_ptr<AttachedWorkload> attached;
  std::vector<Region> regions;  // memload's: one
  std::unique_ptr<DirtyTracker> tracker;
  std::unique_ptr<Memload> memload;
  uint64_t bytes() const {
    uint64_t b = 0;
    for (const Region& r : regions) b += r.length;
    return b;
  }
  Workload* workload = nullptr;
  std::string untracked_writers;  // see RunDescription
};

// A --region-file that other processes map: refused (ABORTED, exit 2)
// unless --allow-foreign-writers; then who maps it, for the report.
absl::StatusOr<std::string> CheckForeignWriters(const std::string& file) {
  absl::StatusOr<std::vector<FileMapper>> others = OtherProcessesMapping(file);
  if (!others.ok()) return others.status();
  if (others->empty()) return std::string();
  const std::string who = DescribeMappers(*others);
  if (!absl::GetFlag(FLAGS_allow_foreign_writers)) {
    return absl::AbortedError(absl::StrFormat(
        "refusing to start: other processes map %s (%s). Their writes would "
        "be invisible to the dirty tracking (userfaultfd write-protection "
        "is per address space), so the destination would not match. Stop "
        "them, have the writer export its memory (--attach), or pass "
        "--allow-foreign-writers if they do not write.",
        file, who));
  }
  std::fprintf(stderr,
               "ramferry-migrate: WARNING: other processes map %s (%s); "
               "their writes are not tracked, only verification checks "
               "them\n",
               file.c_str(), who.c_str());
  return who;
}

absl::StatusOr<SourceMemory> OwnSourceMemory(absl::Duration* prepare) {
  absl::Time prepare_start = absl::Now();
  SourceMemory src;
  const std::string file = absl::GetFlag(FLAGS_region_file);
  if (!file.empty()) {
    absl::StatusOr<std::string> who = CheckForeignWriters(file);
    if (!who.ok()) return who.status();
    src.untracked_writers = *who;
  }
  absl::StatusOr<std::unique_ptr<RegionMemory>> m =
      file.empty() ? RegionMemory::Anonymous(absl::GetFlag(FLAGS_size).bytes[0])
                   : RegionMemory::OpenFile(file);
  if (!m.ok()) {
    return absl::InvalidArgumentError(m.status().message());
  }
  src.own = std::move(*m);
  // memload's one-time fill (a file keeps the content it has).
  if (!src.own->file_backed()) {
    *prepare += absl::Now() - prepare_start;
    absl::StatusOr<MemoryImage> image =
        MemoryImage::Parse(absl::GetFlag(FLAGS_image));
    if (!image.ok()) {
      return absl::InvalidArgumentError(image.status().message());
    }
    FillImage(src.own->data(),
              PlanImage(src.own->size() / kPageSize, *image,
                        absl::GetFlag(FLAGS_seed)),
              absl::GetFlag(FLAGS_seed));
    prepare_start = absl::Now();
  }
  src.regions = {
      Region{1, RegionName(0), src.own->data(), src.own->size(), kPageSize}};
  // A file's pages go through it, not through this mapping
  // (engine/region_file.h).
  src.regions[0].fd = src.own->fd();
  const std::string tracking = absl::GetFlag(FLAGS_dirty_tracking);
  if (tracking == "uffd") {
    absl::StatusOr<std::unique_ptr<DirtyTracker>> t =
        MakeUffdWpTracker(src.own->data(), src.own->size());
    if (!t.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("dirty tracking: ", t.status().message()));
    }
    src.tracker = std::move(*t);
  } else if (tracking == "bitmap") {
    src.tracker = MakeBitmapTracker(src.regions[0].page_count());
  } else {
    return absl::InvalidArgumentError(
        "--dirty-tracking must be uffd or bitmap");
  }
  Memload::Options lo;
  lo.dirty_set_pages = absl::GetFlag(FLAGS_dirty_set).bytes / kPageSize;
  lo.pages_per_second = DirtyPagesPerSecond(src.own->file_backed());
  lo.writers = absl::GetFlag(FLAGS_writers);
  lo.seed = absl::GetFlag(FLAGS_seed);
  src.memload = std::make_unique<Memload>(
      src.own->data(), src.regions[0].page_count(), lo, src.tracker.get());
  src.memload->Start();
  src.workload = src.memload.get();
  *prepare += absl::Now() - prepare_start;
  return src;
}

// --attach: the exported memory, its writes and its pauses are the other
// process's; nothing here writes.
absl::StatusOr<SourceMemory> AttachedSourceMemory(absl::Duration* prepare) {
  const absl::Time prepare_start = absl::Now();
  SourceMemory src;
  absl::StatusOr<std::unique_ptr<AttachedWorkload>> a =
      AttachedWorkload::Attach(absl::GetFlag(FLAGS_attach),
                               absl::GetFlag(FLAGS_connect_timeout),
                               absl::GetFlag(FLAGS_attach_pause_timeout));
  if (!a.ok()) return a.status();
  src.attached = std::move(*a);
  src.regions = src.attached->regions(RegionName);
  src.tracker = src.attached->MakeTracker();
  src.workload = src.attached.get();
  *prepare += absl::Now() - prepare_start;
  return src;
}

// The source role, given where to connect (over `links`' links, for
// --demo-link).
int RunSourceRole(SessionOptions opt, const FetchPeerReport& fetch_peer = {},
                  const cli::LinkTestbed* links = nullptr) {
  absl::StatusOr<std::string> transport_reason = ChooseFor(&opt);
  if (!transport_reason.ok()) {
    return Usage(std::string(transport_reason.status().message()));
  }
  // Mapping the memory and arming the dirty tracking are part of the
  // migration's cost (a file's pages are mapped in here); the one-time
  // random fill of anonymous memory is the workload's, not the migration's.
  absl::Duration prepare;
  absl::StatusOr<SourceMemory> src = absl::GetFlag(FLAGS_attach).empty()
                                         ? OwnSourceMemory(&prepare)
                                         : AttachedSourceMemory(&prepare);
  if (!src.ok()) {
    if (absl::IsInvalidArgument(src.status())) {
      return Usage(std::string(src.status().message()));
    }
    std::fprintf(stderr, "ramferry-migrate: %s\n",
                 std::string(src.status().message()).c_str());
    return absl::IsAborted(src.status()) ? 2 : 1;
  }
  if (absl::Status s = CheckPinningLimits(opt, kPageSize, src->bytes());
      !s.ok()) {
    std::fprintf(stderr, "ramferry-migrate: refusing to start: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  const absl::Time prepare_start = absl::Now();

  absl::StatusOr<ConvergenceConfig> convergence = Convergence();
  if (!convergence.ok()) {
    return Usage(std::string(convergence.status().message()));
  }
  PrecopyConfig config;
  config.session = opt;
  config.convergence = *convergence;
  config.verify = absl::GetFlag(FLAGS_verify) != "off";
  config.postcopy = PostcopyFlag();
  config.on_timeout = TimeoutActionFlag().value_or(TimeoutAction::kCancel);
  config.resume_timeout = opt.postcopy_resume_timeout;
  config.progress = !absl::GetFlag(FLAGS_json);
  // Nobody else maps the memory (an attached workload's memfd can be
  // written past its pause), so the pause stops every writer; and with no
  // writer running, it does not change at all.
  config.pause_freezes =
      src->attached == nullptr && src->untracked_writers.empty();
  config.memory_frozen = config.pause_freezes && !src->workload->running();
  prepare += absl::Now() - prepare_start;
  PrecopyReport r =
      RunPrecopy(config, src->regions, *src->tracker, *src->workload);
  r.prepare_s = absl::ToDoubleSeconds(prepare);
  RunDescription run = Describe(opt, src->bytes(), src->tracker->name());
  run.untracked_writers = src->untracked_writers;
  if (src->attached != nullptr) {
    run.region = src->attached->Describe();
    run.attached = run.region;
    run.pause_method = src->attached->pause_method();
    run.pause_note = src->attached->pause_note();
    run.image = "the workload's";
    run.dirty_set_bytes = 0;
    run.dirty_rate_bytes_per_s = 0;
    run.writers = 0;
  }
  run.transport_reason = *transport_reason;
  for (size_t i = 0; links != nullptr && i < links->links(); ++i) {
    run.link_rates.emplace_back(links->destination_address(i), links->rate(i));
  }
  const PeerReport peer = fetch_peer ? fetch_peer() : PeerReport{};
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", SourceJson(run, r, peer.json).c_str());
  } else {
    std::printf("%s%s", SourceTable(run, r).c_str(), peer.table.c_str());
  }
  return r.status.ok() && (r.verified || !config.verify) ? 0 : 1;
}

// Anonymous memory (huge pages), a file, or for --export a memfd another
// process can adopt.
// One per --size.
using DestinationMemories = std::vector<std::unique_ptr<RegionMemory>>;
absl::StatusOr<DestinationMemories> DestinationMemory(const std::string& file) {
  const std::vector<uint64_t> sizes = absl::GetFlag(FLAGS_size).bytes;
  if (!file.empty() && sizes.size() != 1) {
    return absl::InvalidArgumentError(
        "--region-file is one region: give --size one size");
  }
  DestinationMemories mems;
  for (const uint64_t bytes : sizes) {
    absl::StatusOr<std::unique_ptr<RegionMemory>> m =
        !file.empty() ? RegionMemory::CreateFile(file, bytes)
        : !absl::GetFlag(FLAGS_export).empty()
            ? RegionMemory::Memfd(bytes)
            : RegionMemory::Anonymous(bytes, /*huge_pages=*/true);
    if (!m.ok()) return m.status();
    mems.push_back(*std::move(m));
  }
  return mems;
}

// --export: a migrated destination hands its memory to the process
// waiting on the socket. Nothing is handed over after a failed session.
void HandOver(const DestinationMemories& mems, DestinationReport* r) {
  const std::string path = absl::GetFlag(FLAGS_export);
  if (path.empty() || !r->status.ok()) return;
  r->exported_to = path;
  const absl::Time start = absl::Now();
  std::vector<SharedRegion> regions;
  for (size_t i = 0; i < mems.size(); ++i) {
    regions.push_back({static_cast<uint32_t>(i + 1), RegionName(i),
                       mems[i]->data(), mems[i]->size(), mems[i]->fd(), 0});
  }
  r->status =
      HandOverMemory(path, regions, absl::GetFlag(FLAGS_export_timeout));
  r->handover_s = absl::ToDoubleSeconds(absl::Now() - start);
  r->handed_over = r->status.ok();
  if (!r->status.ok()) {
    r->status = absl::Status(r->status.code(),
                             absl::StrCat("migrated, but not handed over to ",
                                          path, ": ", r->status.message()));
  }
}

// The destination's regions: memory it just mapped reads as zero (fresh
// anonymous memory, a new or resized file), so zero pages for it need no
// write; a reused file holds what the last run left.
std::vector<Region> DestinationRegions(const DestinationMemories& mems) {
  std::vector<Region> regions;
  for (size_t i = 0; i < mems.size(); ++i) {
    Region region{static_cast<uint32_t>(i + 1), RegionName(i), mems[i]->data(),
                  mems[i]->size(), kPageSize};
    region.reads_as_zero = !mems[i]->reused_file();
    region.fd = mems[i]->fd();
    regions.push_back(std::move(region));
  }
  return regions;
}

// --prefault=auto, per memory kind, from the measurements in the README
// (4 GiB, 2 channels, loopback): anonymous memory (huge pages) gains from
// a background pre-fault beside the receivers; a file's pages are written
// through the file (Region::fd), so its page tables here are never needed.
absl::StatusOr<Prefault> DestinationPrefault(const RegionMemory& mem) {
  const std::string flag = absl::GetFlag(FLAGS_prefault);
  if (flag != "auto") return ParsePrefault(flag);
  // Post-copy drops the pages it lacks at the switch: a background
  // pre-fault must be over by then, so it runs before listening; with
  // --postcopy=now every page is dropped, so none is faulted in at all.
  if (PostcopyFlag() == PostcopyMode::kNow) return Prefault::kOff;
  if (PostcopyFlag() != PostcopyMode::kOff) return Prefault::kBefore;
  // A file's pages land through it (Region::fd), never through this
  // process's page tables: filling those would be all cost.
  return mem.file_backed() ? Prefault::kOff : Prefault::kDuring;
}

// Post-copy's destination workload: memload as the source runs it (the
// same flags, so give both ends the same), from the switch on.
std::optional<Memload::Options> DestinationWorkload() {
  if (PostcopyFlag() == PostcopyMode::kOff) return std::nullopt;
  Memload::Options lo;
  lo.dirty_set_pages = absl::GetFlag(FLAGS_dirty_set).bytes / kPageSize;
  lo.pages_per_second = DirtyPagesPerSecond(/*file_backed=*/false);
  lo.writers = absl::GetFlag(FLAGS_writers);
  lo.seed = absl::GetFlag(FLAGS_seed);
  return lo;
}

int RunDestRole(SessionOptions opt) {
  absl::StatusOr<DestinationMemories> mem =
      DestinationMemory(absl::GetFlag(FLAGS_region_file));
  if (!mem.ok()) return Usage(std::string(mem.status().message()));
  // Every region is of one kind: the first speaks for all.
  absl::StatusOr<Prefault> prefault = DestinationPrefault(*mem->front());
  if (!prefault.ok()) return Usage(std::string(prefault.status().message()));
  const std::vector<Region> regions = DestinationRegions(*mem);
  const bool json = absl::GetFlag(FLAGS_json);
  DestinationReport r = RunDestination(
      opt, regions, *prefault, !json,
      [&](uint16_t port) {
        std::fprintf(stderr, "ramferry-migrate: listening on %s:%d\n",
                     opt.host.c_str(), port);
      },
      DestinationWorkload());
  HandOver(*mem, &r);
  std::printf("%s\n",
              json ? DestinationJson(r).c_str() : DestinationTable(r).c_str());
  // Verification is the source's (--verify); the destination's part is to
  // have applied every round and seen FINISH confirmed.
  return r.status.ok() ? 0 : 1;
}

// One line of `in` without its newline, however long (a destination's
// JSON grows with its channels); nullopt at the end of the stream.
std::optional<std::string> ReadLine(FILE* in) {
  char* buf = nullptr;
  size_t cap = 0;
  const ssize_t n = getline(&buf, &cap, in);
  std::optional<std::string> line;
  if (n >= 0) {
    line.emplace(buf, static_cast<size_t>(n));
    while (!line->empty() && line->back() == '\n') line->pop_back();
  }
  free(buf);
  return line;
}

std::string ReadRest(FILE* in) {
  std::string rest;
  while (std::optional<std::string> line = ReadLine(in)) {
    absl::StrAppend(&rest, *line, "\n");
  }
  return rest;
}

// The demo's destination file: --dest-region-file, or the source file's
// name + ".dest"; empty for anonymous memory. Sizes the region like the
// source file.
absl::StatusOr<std::string> DemoDestinationFile() {
  if (const std::string path = absl::GetFlag(FLAGS_attach); !path.empty()) {
    // The destination is sized like the exported region: a look at the
    // offer, given up at once (the export then serves the source).
    absl::StatusOr<std::unique_ptr<AttachedWorkload>> probe =
        AttachedWorkload::Attach(path, absl::GetFlag(FLAGS_connect_timeout),
                                 absl::ZeroDuration());
    if (!probe.ok()) return probe.status();
    RegionSizes sizes;
    for (const Region& r : (*probe)->regions(RegionName)) {
      sizes.bytes.push_back(r.length);
    }
    absl::SetFlag(&FLAGS_size, sizes);
  }
  const std::string src = absl::GetFlag(FLAGS_region_file);
  if (src.empty()) return std::string();
  std::string dest_file = absl::GetFlag(FLAGS_dest_region_file);
  if (dest_file.empty()) dest_file = src + ".dest";
  if (dest_file == src) {
    return absl::InvalidArgumentError(
        "--dest-region-file must differ from --region-file");
  }
  // The destination must be sized like the source file.
  absl::StatusOr<std::unique_ptr<RegionMemory>> probe =
      RegionMemory::OpenFile(src);
  if (!probe.ok()) return probe.status();
  absl::SetFlag(&FLAGS_size, RegionSizes{{(*probe)->size()}});
  return dest_file;
}

// The demo destination's process body: serves one session on loopback
// (or on every link of `links`, from its destination side), writes its
// port, then its report (JSON line, then the table) to `out`.
[[noreturn]] void ServeDemoDestination(SessionOptions opt,
                                       const std::string& dest_file,
                                       const cli::LinkTestbed* links,
                                       FILE* out) {
  opt.host = absl::GetFlag(FLAGS_demo_host);
  if (links != nullptr) {
    if (absl::Status s = links->EnterDestination(); !s.ok()) {
      std::fprintf(stderr, "ramferry-migrate: destination: %s\n",
                   std::string(s.message()).c_str());
      _exit(1);
    }
    opt.host = "0.0.0.0";  // every link's address: its namespace has no other
  }
  absl::StatusOr<DestinationMemories> mem = DestinationMemory(dest_file);
  absl::StatusOr<Prefault> prefault =
      mem.ok() ? DestinationPrefault(*mem->front()) : mem.status();
  if (!prefault.ok()) {
    std::fprintf(stderr, "ramferry-migrate: destination: %s\n",
                 std::string(prefault.status().message()).c_str());
    _exit(1);
  }
  const std::vector<Region> regions = DestinationRegions(*mem);
  opt.port = 0;
  DestinationReport r = RunDestination(
      opt, regions, *prefault, false,
      [&](uint16_t port) {
        std::fprintf(out, "%d\n", port);
        std::fflush(out);
      },
      DestinationWorkload());
  HandOver(*mem, &r);
  std::fprintf(out, "%s\n%s", DestinationJson(r).c_str(),
               DestinationTable(r).c_str());
  std::fclose(out);
  _exit(r.status.ok() ? 0 : 1);
}

// The demo's destination process, once it listens.
struct DemoDestination {
  pid_t pid = -1;
  uint16_t port = 0;
  FILE* report = nullptr;  // the rest of its output: its report
};

// Forks the destination and waits for its port. One that ends before
// listening says why: its report, or its error on stderr.
absl::StatusOr<DemoDestination> ForkDestination(const SessionOptions& opt,
                                                const std::string& dest_file,
                                                const cli::LinkTestbed* links) {
  absl::StatusOr<cli::ForkedChild> forked = cli::ForkWithPipe([&](int out) {
    ServeDemoDestination(opt, dest_file, links, fdopen(out, "w"));
  });
  if (!forked.ok()) return forked.status();
  const pid_t child = forked->pid;
  DemoDestination d{child, 0, fdopen(forked->from_child.Release(), "r")};
  unsigned port = 0;
  const std::optional<std::string> first = ReadLine(d.report);
  if (first && absl::SimpleAtoi(absl::StripAsciiWhitespace(*first), &port) &&
      port > 0 && port <= 0xFFFF) {
    d.port = static_cast<uint16_t>(port);
    return d;
  }
  const std::string why =
      first ? absl::StrCat(*first, "\n", ReadRest(d.report)) : std::string();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  std::fclose(d.report);
  return absl::UnavailableError(
      absl::StrCat("the destination process did not start",
                   why.empty() ? " (its error is above)" : ":\n" + why));
}

// The destination reports once its session ends, which follows the
// source's end closely; one that says nothing in time is killed.
PeerReport FetchDestinationReport(const DemoDestination& d) {
  PeerReport p;
  pollfd pfd{fileno(d.report), POLLIN, 0};
  if (poll(&pfd, 1, 10000) <= 0) {
    kill(d.pid, SIGKILL);
    p.table = "destination: no report within 10 s (killed)\n";
    return p;
  }
  if (std::optional<std::string> json = ReadLine(d.report)) {
    p.json = *std::move(json);
    p.table = ReadRest(d.report);
  }
  return p;
}

// --demo-link: the links, made before any thread starts, with this thread
// (the source's, whose threads inherit it) in their source namespace.
absl::StatusOr<std::unique_ptr<cli::LinkTestbed>> MakeDemoLinks() {
  const std::string flag = absl::GetFlag(FLAGS_demo_link);
  if (flag.empty()) return nullptr;
  absl::StatusOr<std::vector<std::string>> rates = cli::ParseLinkRateList(flag);
  if (!rates.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--demo-link: ", rates.status().message()));
  }
  absl::StatusOr<std::unique_ptr<cli::LinkTestbed>> links =
      cli::LinkTestbed::Create(*rates);
  if (absl::IsPermissionDenied(links.status())) {
    return absl::PermissionDeniedError(
        "--demo-link needs root to create network namespaces "
        "(CAP_SYS_ADMIN, CAP_NET_ADMIN); run as root or drop --demo-link");
  }
  if (!links.ok()) {
    return absl::Status(links.status().code(),
                        absl::StrCat("--demo-link: ", links.status().message(),
                                     " (or drop --demo-link)"));
  }
  for (size_t i = 0; i < (*links)->links(); ++i) {
    std::fprintf(stderr, "ramferry-migrate: demo %s\n",
                 (*links)->Describe(i).c_str());
  }
  if (absl::Status s = (*links)->EnterSource(); !s.ok()) return s;
  return links;
}

// Both ends on loopback, or over --demo-link's links: the destination in
// a child process (its own CPU and memory), the source here.
int RunDemo(SessionOptions opt) {
  cli::WarnIfUnauthenticated(opt, "ramferry-migrate");
  absl::StatusOr<std::string> dest_file = DemoDestinationFile();
  if (!dest_file.ok()) return Usage(std::string(dest_file.status().message()));
  if (absl::StatusOr<std::vector<std::string>> rates =
          cli::ParseLinkRateList(absl::GetFlag(FLAGS_demo_link));
      !absl::GetFlag(FLAGS_demo_link).empty() && rates.ok() &&
      rates->size() > opt.channels) {
    return Usage(absl::StrFormat(
        "--demo-link makes %d links for --channels=%d: give each link a "
        "channel at least",
        rates->size(), opt.channels));
  }
  absl::StatusOr<std::unique_ptr<cli::LinkTestbed>> links = MakeDemoLinks();
  if (!links.ok()) {
    std::fprintf(stderr, "ramferry-migrate: %s\n",
                 std::string(links.status().message()).c_str());
    return absl::IsInvalidArgument(links.status()) ? 2 : 1;
  }
  absl::StatusOr<DemoDestination> d =
      ForkDestination(opt, *dest_file, links->get());
  if (!d.ok()) {
    std::fprintf(stderr, "ramferry-migrate: %s\n",
                 std::string(d.status().message()).c_str());
    return 1;
  }
  opt.host = absl::GetFlag(FLAGS_demo_host);
  opt.port = d->port;
  if (*links != nullptr) {
    // The control connection and channel 0 over link 0, channel i over
    // link i % links.
    std::vector<Endpoint> to;
    for (size_t i = 0; i < (*links)->links(); ++i) {
      to.push_back({(*links)->destination_address(i), d->port});
    }
    cli::ApplyEndpoints(to, &opt);
  }
  const int rc = RunSourceRole(
      opt, [&] { return FetchDestinationReport(*d); }, links->get());
  std::fclose(d->report);
  kill(d->pid, SIGKILL);  // no-op when it already exited
  waitpid(d->pid, nullptr, 0);
  return rc;
}

// --make-image: a data file, made once, for runs that migrate a file.
int RunMakeImage(const std::string& path) {
  if (absl::GetFlag(FLAGS_size).bytes.size() != 1) {
    return Usage("--make-image writes one file: give --size one size");
  }
  absl::StatusOr<MemoryImage> image =
      MemoryImage::Parse(absl::GetFlag(FLAGS_image));
  if (!image.ok()) return Usage(std::string(image.status().message()));
  // A new file, so untouched pages are holes and not an old run's bytes.
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Usage(absl::StrCat("--make-image: cannot replace ", path, ": ",
                              std::generic_category().message(errno)));
  }
  absl::StatusOr<std::unique_ptr<RegionMemory>> mem =
      RegionMemory::CreateFile(path, absl::GetFlag(FLAGS_size).bytes[0]);
  if (!mem.ok()) return Usage(std::string(mem.status().message()));
  const uint64_t pages = (*mem)->size() / kPageSize;
  std::fprintf(stderr, "ramferry-migrate: writing %s (%s, %s)\n", path.c_str(),
               cli::FormatBytes((*mem)->size()).c_str(),
               image->ToString().c_str());
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const std::vector<uint64_t> counts =
      FillImage((*mem)->data(), PlanImage(pages, *image, seed), seed);
  std::printf(
      "{\"path\":\"%s\",\"bytes\":%llu,\"image\":\"%s\",\"zero_pages\":%llu,"
      "\"untouched_pages\":%llu,\"text_pages\":%llu,\"random_pages\":%llu}\n",
      path.c_str(), static_cast<unsigned long long>((*mem)->size()),
      image->ToString().c_str(), static_cast<unsigned long long>(counts[0]),
      static_cast<unsigned long long>(counts[1]),
      static_cast<unsigned long long>(counts[2]),
      static_cast<unsigned long long>(counts[3]));
  return 0;
}

}  // namespace
}  // namespace ramferry::migrate

int main(int argc, char** argv) {
  // --postcopy alone means on.
  ramferry::cli::AcceptBareFlag(argc, argv, "postcopy", "--postcopy=on");
  ramferry::cli::InitBinary(
      argc, argv,
      "live migration of changing memory over ramferry channels: pre-copy,\n"
      "then stop-and-copy or (--postcopy) post-copy.\n"
      "  ramferry-migrate --demo                       both ends on loopback\n"
      "  ramferry-migrate --role=dest --listen=0.0.0.0:7070 --size=1GiB\n"
      "  ramferry-migrate --role=source --connect=HOST:7070 --size=1GiB",
      __FILE__);
  using namespace ramferry::migrate;
  if (const std::string path = absl::GetFlag(FLAGS_make_image); !path.empty()) {
    return RunMakeImage(path);
  }
  const std::string role = absl::GetFlag(FLAGS_role);
  if (!absl::GetFlag(FLAGS_demo) && role != "source" && role != "dest") {
    return Usage("choose --role=source, --role=dest or --demo");
  }
  if (!absl::GetFlag(FLAGS_demo) && !absl::GetFlag(FLAGS_demo_link).empty()) {
    return Usage("--demo-link goes with --demo");
  }
  if (absl::Status s = ramferry::migrate::CheckHandoffFlags(role); !s.ok()) {
    return Usage(std::string(s.message()));
  }
  if (absl::GetFlag(FLAGS_size).bytes.size() > 1 && role != "dest") {
    return Usage(
        "a list of sizes is for --role=dest (one region each); a source "
        "migrates its one region or the regions its attached workload "
        "exports");
  }
  // Before Session(): its checks name options, these name the flags.
  if (absl::Status s =
          CheckPostcopy(role == "dest" || absl::GetFlag(FLAGS_demo));
      !s.ok()) {
    return Usage(std::string(s.message()));
  }
  absl::StatusOr<ramferry::SessionOptions> opt = Session();
  if (!opt.ok()) return Usage(std::string(opt.status().message()));
  if (absl::GetFlag(FLAGS_demo)) return RunDemo(*opt);
  ramferry::cli::WarnIfUnauthenticated(*opt, "ramferry-migrate");
  if (role == "source") {
    absl::StatusOr<std::vector<ramferry::Endpoint>> to =
        ramferry::cli::ParseEndpointList(absl::GetFlag(FLAGS_connect));
    if (!to.ok()) {
      return Usage("--connect: " + std::string(to.status().message()));
    }
    if (to->size() > opt->channels) {
      return Usage(absl::StrFormat(
          "--connect names %d addresses for --channels=%d: give each "
          "address a channel at least",
          to->size(), opt->channels));
    }
    ramferry::cli::ApplyEndpoints(*to, &*opt);
    if (absl::Status s = ramferry::ValidateOptions(*opt); !s.ok()) {
      return Usage("--connect: " + std::string(s.message()));
    }
    return RunSourceRole(*opt);
  }
  absl::StatusOr<ramferry::Endpoint> at =  // role == "dest"
      ramferry::cli::ParseHostPort(absl::GetFlag(FLAGS_listen));
  if (!at.ok()) {
    return Usage("--listen: " + std::string(at.status().message()));
  }
  opt->host = at->host;
  opt->port = at->port;
  return RunDestRole(*opt);
}
