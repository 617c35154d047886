// ramferry-migrate's flags, defined here, where --help looks for them.
#include "tools/migrate/flags.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ramferry/region.h"
#include "ramferry/transport.h"
#include "tools/common/channel_flags.h"
#include "tools/common/cli.h"

namespace ramferry::migrate {

const char kFlagsFile[] = __FILE__;

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

std::string RegionName(size_t i) {
  return i == 0 ? "ram" : absl::StrCat("ram", i + 1);
}

}  // namespace ramferry::migrate

ABSL_FLAG(std::optional<ramferry::migrate::Role>, role, std::nullopt,
          "source | dest (or use --demo to run both on loopback)");
ABSL_FLAG(std::string, connect, "",
          "source: destination HOST:PORT, or a comma list A:P,B:P of the "
          "destination's addresses on several links: the data channels "
          "spread over all of them (channel i to item i % count), the "
          "control connection goes to the first");
ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "dest: HOST:PORT to listen on (not --demo's: its destination takes "
          "a free port on --demo-host, named in its report)");
ABSL_FLAG(bool, demo, false,
          "run a destination process and a source on loopback, one report "
          "(the destination on a free port of --demo-host)");
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
ABSL_FLAG(ramferry::cli::TransportFlag, transport,
          ramferry::cli::TransportFlag{ramferry::TransportKind::kTcp},
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
ABSL_FLAG(ramferry::migrate::DirtyTracking, dirty_tracking,
          ramferry::migrate::DirtyTracking::kUffd,
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
ABSL_FLAG(ramferry::migrate::DirtyWrite, dirty_write,
          ramferry::migrate::DirtyWrite::kWord,
          "memload: what one write changes: word (8 random bytes at a random "
          "place of the page, as a running program's stores do) | page "
          "(the whole page, new random words: what no delta can shrink)");
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
ABSL_FLAG(std::optional<ramferry::migrate::TimeoutAction>, on_timeout,
          std::nullopt,
          "source, with --timeout: cancel (the default without --postcopy: "
          "stop at once, even mid-round; "
          "the source keeps running and the destination discards what it "
          "received), force (stop and copy after the round in flight, "
          "whatever the downtime) or postcopy (switch to post-copy after "
          "the round in flight; the default with --postcopy=on or auto)");
ABSL_FLAG(ramferry::migrate::PostcopyMode, postcopy,
          ramferry::migrate::PostcopyMode::kOff,
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
ABSL_FLAG(ramferry::migrate::OnOff, postcopy_urgent,
          ramferry::migrate::OnOff::kOn,
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
ABSL_FLAG(ramferry::migrate::PrefaultFlag, prefault,
          ramferry::migrate::PrefaultFlag{},
          "dest: fault the region in ahead of the data: before (all of it, on "
          "every core, before listening), during (one background thread "
          "from the first page on, while the data arrives), idle (that thread "
          "only until the first "
          "page arrives), off, or auto: during for anonymous memory (which "
          "also gets huge pages), off for a file, whose pages are written "
          "through it and never through this process's page tables (chosen "
          "by measurement, see docs/migrate.md); true/false mean before/off");
ABSL_FLAG(ramferry::migrate::VerifyFlag, verify,
          ramferry::migrate::VerifyFlag::kFull,
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
ABSL_FLAG(std::string, control, "",
          "either end: serve this unix socket (mode 0600, this user or "
          "root) for orchestrators: JSON lines with query, set "
          "(max-bandwidth, downtime-limit, max-rounds, auto-converge), "
          "start-postcopy, cancel and subscribe (events: round-done, "
          "paused, switchover, postcopy-armed, completed, failed, "
          "cancelled, ...); docs/control.md");
ABSL_FLAG(std::string, qemu, "",
          "carry QEMU's own live migration (main and multifd connections) "
          "instead of memory of this process: the source listens on this "
          "unix socket, where QEMU migrates to (migrate uri=unix:PATH); the "
          "destination connects each stream to QEMU's incoming socket here "
          "(-incoming unix:PATH). QEMU decides convergence and switchover; "
          "docs/qemu.md");
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
ABSL_FLAG(std::string, hand_over, "",
          "with --attach, no --role: migrate on this host by handing the "
          "workload's memory, uncopied, to the process waiting on this unix "
          "socket (ramferry_adopt_listen / AdoptedMemory): the workload "
          "(which must allow it: ramferry_export_listen_with with "
          "RAMFERRY_EXPORT_ALLOW_HAND_OVER) is paused, its memfds go "
          "read-write to the adopter, and once the adopter acknowledged (the "
          "commit point) it is told MIGRATED; any failure before resumes it. "
          "--verify=full (the default) adds a digest of every region, taken "
          "here over the paused memory and checked by the adopter, to the "
          "downtime; --verify=off skips it");
ABSL_FLAG(absl::Duration, hand_over_timeout, absl::Seconds(30),
          "--hand-over: how long to wait for the adopter to be there and for "
          "its acknowledgement");
ABSL_FLAG(bool, allow_unauthenticated, false,
          "--demo: run both ends without a key instead of the fresh one the "
          "demo makes (anything that reaches the port can write into the "
          "destination's memory meanwhile)");
