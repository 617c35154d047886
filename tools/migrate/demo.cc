// ramferry-migrate --demo: the destination forked on loopback (or over
// --demo-link's links), the source here.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "ramferry/region.h"
#include "tools/common/auth_flags.h"
#include "tools/common/cli.h"
#include "tools/common/endpoints.h"
#include "tools/common/fork_with_pipe.h"
#include "tools/common/link_testbed.h"
#include "tools/migrate/attached_workload.h"
#include "tools/migrate/destination.h"
#include "tools/migrate/flags.h"
#include "tools/migrate/region_memory.h"
#include "tools/migrate/report.h"
#include "tools/migrate/roles.h"
#include "tools/migrate/settings.h"
#include "tools/migrate/stop_signals.h"

namespace ramferry::migrate {

namespace {

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
    RAMFERRY_ASSIGN_OR_RETURN(
        std::unique_ptr<AttachedWorkload> probe,
        AttachedWorkload::Attach(path, absl::GetFlag(FLAGS_connect_timeout),
                                 absl::ZeroDuration()));
    RegionSizes sizes;
    for (const Region& r : probe->regions(RegionName)) {
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
  RAMFERRY_ASSIGN_OR_RETURN(std::unique_ptr<RegionMemory> probe,
                            RegionMemory::OpenFile(src));
  absl::SetFlag(&FLAGS_size, RegionSizes{{probe->size()}});
  return dest_file;
}

// The demo destination's process body: serves one session on loopback
// (or on every link of `links`, from its destination side), writes its
// port, then its report (JSON line, then the table) to `out`.
[[noreturn]] void ServeDemoDestination(SessionOptions opt,
                                       const std::string& dest_file,
                                       const cli::LinkTestbed* links,
                                       FILE* out) {
  // Forked before its parent started its stop signals' thread: this
  // process starts its own, which cancels its session.
  stop_signals::Start();
  LiveControl control(LiveControl::Role::kDestination, {}, {});
  StopDestinationOnSignals(control);
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
      DestinationWorkload(), &control, /*publish_rounds=*/false);
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
  // This process's stop signals, from here (main leaves them to the demo,
  // so that it forks with one thread).
  stop_signals::Start();
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
// source's end closely; one that says nothing in time is killed. Without a
// session (the source's set-up failed) it has nothing to report and would
// only go on listening: it is stopped at once.
PeerReport FetchDestinationReport(const DemoDestination& d, bool connected) {
  PeerReport p;
  if (!connected) {
    kill(d.pid, SIGKILL);
    p.table = "destination: no session was set up, so no report (stopped)\n";
    return p;
  }
  pollfd pfd{fileno(d.report), POLLIN, 0};
  if (poll(&pfd, 1, 10000) <= 0) {
    kill(d.pid, SIGKILL);
    p.table = "destination: no report within 10 s (killed)\n";
    return p;
  }
  if (std::optional<std::string> json = ReadLine(d.report)) {
    p.json = *std::move(json);
    p.table = ReadRest(d.report);
    return p;
  }
  // Its output ended without a report: it was killed. Left unreaped
  // (WNOWAIT), so its pid stays its own until RunDemo reaps it.
  siginfo_t info{};
  if (waitid(P_PID, d.pid, &info, WEXITED | WNOWAIT) == 0 &&
      (info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED)) {
    p.table = absl::StrCat("destination: ended by ",
                           stop_signals::Name(info.si_status),
                           " before its report\n");
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
  RAMFERRY_RETURN_IF_ERROR((*links)->EnterSource());
  return links;
}

}  // namespace

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
  // A destination that ends before the session was set up (a signal, a
  // crash) leaves the source waiting on a port nobody listens on, for
  // --connect-timeout: it is stopped then, and the run ends.
  std::atomic<bool> demo_over{false};
  std::thread watch([pid = d->pid, &demo_over] {
    siginfo_t info{};
    while (waitid(P_PID, pid, &info, WEXITED | WNOWAIT) != 0 &&
           errno == EINTR) {
    }
    if (demo_over.load()) return;
    stop_signals::EndIfUnstarted(absl::StrCat(
        "the destination process ended (",
        info.si_code == CLD_EXITED ? absl::StrCat("exit ", info.si_status)
                                   : stop_signals::Name(info.si_status),
        ")"));
  });
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
      opt,
      [&](bool connected) { return FetchDestinationReport(*d, connected); },
      links->get());
  std::fclose(d->report);
  demo_over.store(true);
  kill(d->pid, SIGKILL);  // no-op when it already exited
  watch.join();           // it saw the end, without reaping it
  waitpid(d->pid, nullptr, 0);
  return rc;
}

}  // namespace ramferry::migrate
