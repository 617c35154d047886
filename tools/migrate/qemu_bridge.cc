#include "tools/migrate/qemu_bridge.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tools/common/cli.h"
#include "tools/common/json.h"
#include "tools/common/stats_json.h"
#include "tools/common/unix_socket.h"
#include "tools/migrate/flags.h"
#include "tools/migrate/live_control.h"
#include "tools/migrate/settings.h"
#include "tools/migrate/stop_signals.h"

namespace ramferry::migrate {
namespace {

// What one end did, for its report.
struct BridgeReport {
  const char* role = "source";
  std::string qemu;
  absl::Status status;
  double seconds = 0;
  double cpu_s = 0;
  SessionStats stats;
};

std::string ReportJson(const BridgeReport& r) {
  const ChannelStats total = r.stats.Total();
  uint64_t forward = 0, back = 0;
  for (const StreamStats& s : r.stats.streams) {
    forward += s.forward_bytes;
    back += s.back_bytes;
  }
  Json j{{"role", r.role},
         {"qemu", r.qemu},
         {"ok", r.status.ok()},
         {"seconds", r.seconds},
         {"cpu_s", r.cpu_s},
         {"forward_bytes", forward},
         {"back_bytes", back},
         {"cpu_s_per_gib", forward == 0
                               ? 0.0
                               : r.cpu_s / (static_cast<double>(forward) /
                                            static_cast<double>(1ull << 30))},
         {"channels_lost", r.stats.channels_lost.size()},
         {"lost", cli::ChannelLossesJson(r.stats)},
         {"streams", cli::StreamArrayJson(r.stats)},
         {"total", cli::ChannelStatsJson(total)}};
  if (!r.status.ok()) j["error"] = r.status.ToString();
  return j.dump();
}

std::string ReportTable(const BridgeReport& r) {
  std::string out =
      absl::StrFormat("ramferry-migrate --qemu (%s): %s\n", r.role,
                      r.status.ok() ? "completed" : r.status.ToString());
  for (const StreamStats& s : r.stats.streams) {
    absl::StrAppendFormat(
        &out, "  stream %d (channel %d): %s forward, %s back\n", s.stream,
        s.channel, cli::FormatBytes(s.forward_bytes),
        cli::FormatBytes(s.back_bytes));
  }
  absl::StrAppendFormat(&out, "  %.2f s, %.2f CPU s\n", r.seconds, r.cpu_s);
  return out;
}

int Report(const BridgeReport& r) {
  std::printf("%s\n", absl::GetFlag(FLAGS_json) ? ReportJson(r).c_str()
                                                : ReportTable(r).c_str());
  std::fflush(stdout);
  if (r.status.ok()) return 0;
  const int sig = stop_signals::Received();
  return sig != 0 ? 128 + sig : 1;
}

// A line on stderr every second while `stats` runs: the bytes each way.
class Progress {
 public:
  explicit Progress(std::function<SessionStats()> stats) {
    if (absl::GetFlag(FLAGS_json)) return;
    thread_ = std::thread([this, stats = std::move(stats)] {
      while (!done_.load()) {
        absl::SleepFor(absl::Seconds(1));
        uint64_t forward = 0, back = 0;
        const SessionStats s = stats();
        for (const StreamStats& t : s.streams) {
          forward += t.forward_bytes;
          back += t.back_bytes;
        }
        std::fprintf(stderr,
                     "ramferry-migrate: %zu QEMU connections, %s forward, "
                     "%s back\n",
                     s.streams.size(), cli::FormatBytes(forward).c_str(),
                     cli::FormatBytes(back).c_str());
      }
    });
  }
  ~Progress() {
    done_.store(true);
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

void CancelOnSignals(LiveControl& control, const char* role) {
  stop_signals::SetRole({.stop = [&control, role](int sig) {
    (void)control.CancelWith(absl::CancelledError(absl::StrCat(
        "interrupted by ", stop_signals::Name(sig), " on the ", role,
        ": every QEMU connection is cut, and QEMU fails its migration")));
  }});
}

// The source's accept loop: each connection QEMU makes is carried, until
// every stream ended both ways.
absl::Status CarryQemu(Sender& sender, int listener, LiveControl& control) {
  size_t streams = 0;
  while (true) {
    if (absl::Status c = control.cancelled(); !c.ok()) return c;
    pollfd p{listener, POLLIN, 0};
    const int n = poll(&p, 1, 100);
    if (n < 0 && errno != EINTR) return base::ErrnoStatus(errno, "poll");
    if (n > 0) {
      const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        return base::ErrnoStatus(errno, "accepting QEMU's connection");
      }
      absl::StatusOr<uint32_t> id = sender.CarryStream(fd);
      if (!id.ok()) return id.status();
      if (!absl::GetFlag(FLAGS_json)) {
        std::fprintf(stderr, "ramferry-migrate: QEMU connection %u carried\n",
                     *id);
      }
      ++streams;
      continue;
    }
    if (streams == 0) continue;
    absl::StatusOr<bool> ended = sender.AwaitStreams(absl::Now());
    if (!ended.ok()) return ended.status();
    if (*ended) return absl::OkStatus();
  }
}

}  // namespace

absl::Status CheckQemuFlags() {
  const char* other = absl::GetFlag(FLAGS_demo)              ? "--demo"
                      : !absl::GetFlag(FLAGS_attach).empty() ? "--attach"
                      : !absl::GetFlag(FLAGS_export).empty() ? "--export"
                      : !absl::GetFlag(FLAGS_region_file).empty()
                          ? "--region-file"
                      : PostcopyFlag() != PostcopyMode::kOff ? "--postcopy"
                                                             : nullptr;
  if (other == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--qemu carries QEMU's own migration, which has no ", other,
      ": QEMU decides post-copy itself, and its memory is its own"));
}

int RunQemuSource(const SessionOptions& opt, const std::string& path) {
  BridgeReport r{.role = "source", .qemu = path};
  LiveControl control(LiveControl::Role::kSource,
                      {.max_bandwidth = opt.max_bandwidth}, {});
  CancelOnSignals(control, "source");
  absl::Cleanup no_stop_role = [] { stop_signals::ClearRole(); };
  absl::StatusOr<std::unique_ptr<cli::ControlServer>> server =
      ControlFromFlag(control);
  if (!server.ok()) return Usage(std::string(server.status().message()));
  absl::StatusOr<base::OwnedFd> listener =
      cli::ListenUnix(path, "QEMU migration socket", /*nonblocking=*/true);
  if (!listener.ok()) return Usage(std::string(listener.status().message()));
  absl::Cleanup unlink_path = [&] { unlink(path.c_str()); };
  const absl::Time start = absl::Now();
  const double cpu0 = cli::ProcessCpuSeconds();
  absl::StatusOr<std::unique_ptr<Sender>> sender = Sender::Connect(opt, {});
  if (!sender.ok()) {
    r.status = sender.status();
    return Report(r);
  }
  Sender& s = **sender;
  control.SetSession(
      {.stats = [&s] { return s.stats(); },
       .abort = [&s](const absl::Status& why) { s.Abort(why); },
       .set_max_bandwidth = [&s](uint64_t rate) { s.SetMaxBandwidth(rate); }});
  control.SetState(MigrationState::kActive);
  std::fprintf(stderr,
               "ramferry-migrate: connected; QEMU may migrate to unix:%s\n",
               path.c_str());
  {
    Progress progress([&s] { return s.stats(); });
    r.status = CarryQemu(s, listener->get(), control);
  }
  if (r.status.ok()) r.status = control.Commit();
  if (r.status.ok()) {
    r.status = s.Finish();
  } else {
    s.Abort(r.status);
  }
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  r.cpu_s = cli::ProcessCpuSeconds() - cpu0;
  r.stats = s.stats();
  control.SetSession({});
  control.Finished(r.status, !control.cancelled().ok(),
                   Json{{"streams", cli::StreamArrayJson(r.stats)}});
  return Report(r);
}

int RunQemuDest(const SessionOptions& opt, const std::string& path) {
  BridgeReport r{.role = "destination", .qemu = path};
  LiveControl control(LiveControl::Role::kDestination, {}, {});
  CancelOnSignals(control, "destination");
  absl::Cleanup no_stop_role = [] { stop_signals::ClearRole(); };
  absl::StatusOr<std::unique_ptr<cli::ControlServer>> server =
      ControlFromFlag(control);
  if (!server.ok()) return Usage(std::string(server.status().message()));
  absl::StatusOr<std::unique_ptr<Receiver>> rx = Receiver::Listen(opt, {});
  if (!rx.ok()) return Usage(std::string(rx.status().message()));
  Receiver& receiver = **rx;
  std::fprintf(stderr, "ramferry-migrate: listening on %s:%d\n",
               opt.host.c_str(), receiver.port());
  const absl::Duration connect_timeout = opt.connect_timeout;
  receiver.OnStreamOpen([&path, connect_timeout](
                            uint32_t stream) -> absl::StatusOr<int> {
    absl::StatusOr<base::OwnedFd> fd =
        cli::ConnectUnix(path, "destination QEMU's incoming socket",
                         absl::Now() + connect_timeout);
    if (!fd.ok()) return fd.status();
    if (!absl::GetFlag(FLAGS_json)) {
      std::fprintf(stderr, "ramferry-migrate: stream %u connected to unix:%s\n",
                   stream, path.c_str());
    }
    return fd->Release();
  });
  receiver.OnCommit([&control] { return control.Commit(); });
  control.SetSession(
      {.stats = [&receiver] { return receiver.stats(); },
       .abort = [&receiver](const absl::Status& why) { receiver.Abort(why); },
       .set_max_bandwidth = nullptr});
  control.SetState(MigrationState::kActive);
  const absl::Time start = absl::Now();
  const double cpu0 = cli::ProcessCpuSeconds();
  {
    Progress progress([&receiver] { return receiver.stats(); });
    r.status = receiver.Serve();
  }
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  r.cpu_s = cli::ProcessCpuSeconds() - cpu0;
  r.stats = receiver.stats();
  control.SetSession({});
  control.Finished(r.status, !control.cancelled().ok(),
                   Json{{"streams", cli::StreamArrayJson(r.stats)}});
  return Report(r);
}

}  // namespace ramferry::migrate
