#include "tools/migrate/destination.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/named_enum.h"
#include "ramferry/receiver.h"
#include "tools/common/cli.h"

namespace ramferry::migrate {
namespace {

uint64_t MinorFaults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_minflt);
}

// Faults the region in from its start, a slice at a time, until done or
// `stop`: runs beside the receive threads, which fault in whatever it has
// not reached yet. Populating a page that already holds data leaves it
// as it is, so the two never race on content.
class BackgroundPrefault {
 public:
  // `until` (optional) is asked between slices: true ends the pre-fault.
  // `after` (optional) is polled first: the pre-fault begins once it is
  // true.
  BackgroundPrefault(const Region& region, std::function<bool()> until,
                     std::function<bool()> after = nullptr)
      : region_(region), until_(std::move(until)), after_(std::move(after)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~BackgroundPrefault() { Stop(); }
  void Stop() {
    stop_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) thread_.join();
  }
  uint64_t done_bytes() const { return done_.load(); }
  double seconds() const { return seconds_.load(); }
  absl::Status status() const { return status_; }  // after Stop()

 private:
  void Run() {
    constexpr uint64_t kSlice = 32u << 20;
    while (after_ && !stop_.load() && !after_()) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    const absl::Time start = absl::Now();
    auto* p = static_cast<uint8_t*>(region_.base);
    for (uint64_t off = 0; off < region_.length && !stop_.load();
         off += kSlice) {
      if (until_ && until_()) break;
      const uint64_t n = std::min(kSlice, region_.length - off);
      if (absl::Status s = PrefaultForWrite(p + off, n, 1); !s.ok()) {
        status_ = s;
        break;
      }
      done_.fetch_add(n);
    }
    seconds_.store(absl::ToDoubleSeconds(absl::Now() - start));
  }
  const Region& region_;
  const std::function<bool()> until_;
  const std::function<bool()> after_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> done_{0};
  std::atomic<double> seconds_{0};
  absl::Status status_;  // written by the thread, read after join
  std::thread thread_;
};

constexpr base::EnumName<Prefault> kPrefaultNames[] = {
    {Prefault::kOff, "off"},
    {Prefault::kBefore, "before"},
    {Prefault::kDuring, "during"},
    {Prefault::kIdle, "idle"},
    {Prefault::kOff, "false", "", /*alias=*/true},
    {Prefault::kBefore, "true", "", /*alias=*/true},
};

}  // namespace

absl::StatusOr<Prefault> ParsePrefault(absl::string_view text) {
  return base::ParseName(kPrefaultNames, "--prefault", text);
}
const char* PrefaultName(Prefault p) { return base::NameOf(kPrefaultNames, p); }

namespace {

// Prefault::kBefore: every region faulted in for writing before the
// destination listens.
absl::Status PrefaultBefore(absl::Span<const Region> regions,
                            DestinationReport& report) {
  const absl::Time t = absl::Now();
  absl::Status status;
  for (const Region& r : regions) {
    status =
        PrefaultForWrite(r.base, r.length, std::thread::hardware_concurrency());
    report.prefault_bytes += r.length;
    if (!status.ok()) break;
  }
  report.prefault_s = absl::ToDoubleSeconds(absl::Now() - t);
  return status;
}

// Prefault::kDuring and kIdle: one thread per region, each from its
// region's start.
std::vector<std::unique_ptr<BackgroundPrefault>> StartBackgroundPrefaults(
    absl::Span<const Region> regions, Prefault prefault, Receiver& receiver) {
  const auto data_arrived = [&receiver] {
    return receiver.stats().Total().payload_bytes > 0;
  };
  std::vector<std::unique_ptr<BackgroundPrefault>> background;
  for (const Region& r : regions) {
    if (prefault == Prefault::kDuring) {
      // Not from the start: while the session is set up, a populate holds
      // the mmap lock (and a core) against every mapping the setup makes
      // (thread stacks, buffers, arenas), and the source's connect waited
      // 0.14-0.23 s for it against 0.008 s (4 GiB file, 2 channels); the
      // whole migration took 8% less.
      background.push_back(
          std::make_unique<BackgroundPrefault>(r, nullptr, data_arrived));
    }
    if (prefault == Prefault::kIdle) {
      background.push_back(
          std::make_unique<BackgroundPrefault>(r, data_arrived));
    }
  }
  return background;
}

// Stops the background pre-faults and counts what they did.
void StopBackgroundPrefaults(
    const std::vector<std::unique_ptr<BackgroundPrefault>>& background,
    DestinationReport& report) {
  for (const std::unique_ptr<BackgroundPrefault>& b : background) {
    b->Stop();
    report.prefault_s = std::max(report.prefault_s, b->seconds());
    report.prefault_bytes += b->done_bytes();
    // A failed pre-fault costs speed, not correctness: the receive
    // threads fault the rest in.
    if (!b->status().ok() && report.status.ok()) {
      std::fprintf(stderr,
                   "ramferry-migrate: destination: pre-fault stopped: %s\n",
                   std::string(b->status().message()).c_str());
    }
  }
}

// The progress line, every 250 ms until `done`.
std::thread StartProgress(const Receiver& receiver,
                          const std::atomic<bool>& armed,
                          const std::optional<Memload>& load,
                          const std::atomic<bool>& done) {
  // The objects themselves, not this function's references to them.
  return std::thread([rx = &receiver, armed = &armed, load = &load,
                      done = &done] {
    cli::ProgressLine line(true, 1.0);
    while (!done->load()) {
      const SessionStats st = rx->stats();
      const ChannelStats t = st.Total();
      std::string postcopy;
      if (armed->load()) {
        postcopy = absl::StrFormat(
            "; post-copy: %d of %d missing pages in, %d faults, "
            "workload wrote %d pages",
            st.postcopy.urgent_pages + st.postcopy.pushed_pages,
            st.postcopy.missing_pages, st.postcopy.faults,
            load->has_value() ? (*load)->written() : 0);
      }
      line.Update(absl::StrFormat("destination: %d rounds applied, %s in%s",
                                  rx->applied_rounds(),
                                  cli::FormatBytes(t.payload_bytes), postcopy));
      absl::SleepFor(absl::Milliseconds(250));
    }
  });
}

// --control's round-done events: the rounds applied, every 50 ms until
// `done`.
std::thread StartRoundEvents(const Receiver& receiver, LiveControl& control,
                             const std::atomic<bool>& done) {
  return std::thread([rx = &receiver, control = &control, done = &done] {
    uint64_t published = 0;
    while (true) {
      const bool last = done->load();
      for (const uint64_t applied = rx->applied_rounds(); published < applied;
           ++published) {
        control->UpdateProgress({{"rounds_applied", published + 1}});
        control->Publish(
            "round-done",
            Json{{"round", published},
                 {"bytes_received", rx->stats().Total().payload_bytes}});
      }
      if (last) return;
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
}

// Post-copy's workload after Serve: released where the session failed
// after the switch, then stopped and counted.
void StopWorkload(Receiver& receiver, Memload& load, absl::Time armed_at,
                  DestinationReport& report) {
  if (!report.status.ok() && report.postcopy_armed) {
    // The source is gone with pages this workload may be blocked on:
    // they are lost, so fill them with zeros and let the writers run
    // on to their stop. This memory is to be discarded.
    absl::StatusOr<uint64_t> released = receiver.ReleasePostcopy();
    if (released.ok()) {
      report.released_pages = *released;
    } else {
      // Its writers stay blocked on pages that will never come (a
      // receiver keeps them blocked rather than let them run on zeros
      // unasked); they end with this process.
      std::fprintf(stderr,
                   "ramferry-migrate: destination: releasing the awaited "
                   "pages failed (%s); the workload stays blocked and ends "
                   "with this process\n",
                   std::string(released.status().message()).c_str());
      load.Abandon();
    }
  }
  load.Stop();
  report.workload_pages_written = load.written();
  if (report.postcopy_armed) {
    report.workload_s = absl::ToDoubleSeconds(absl::Now() - armed_at);
  }
}

}  // namespace

DestinationReport RunDestination(
    const SessionOptions& options, absl::Span<const Region> regions,
    Prefault prefault, bool progress,
    const std::function<void(uint16_t)>& on_listening,
    std::optional<Memload::Options> workload, LiveControl* control,
    bool publish_rounds) {
  // Without a control client, the run still goes through one (nobody
  // asks it anything), and nothing watches the rounds for events.
  const bool watched = control != nullptr && publish_rounds;
  LiveControl own_control(LiveControl::Role::kDestination, {}, {});
  if (control == nullptr) control = &own_control;
  uint64_t total_pages = 0;
  for (const Region& r : regions) total_pages += r.page_count();
  DestinationReport report;
  report.prefault = prefault;
  report.postcopy_allowed = options.postcopy;
  report.workload = options.postcopy && workload.has_value();
  const uint64_t faults0 = MinorFaults();
  if (prefault == Prefault::kBefore) {
    report.status = PrefaultBefore(regions, report);
    if (!report.status.ok()) {
      control->Finished(report.status, false, Json::object());
      return report;
    }
  }
  absl::StatusOr<std::unique_ptr<Receiver>> rx =
      Receiver::Listen(options, regions);
  if (!rx.ok()) {
    report.status = rx.status();
    control->Finished(report.status, false, Json::object());
    return report;
  }
  Receiver& receiver = **rx;
  control->SetSession(
      {[&receiver] { return receiver.stats(); },
       [&receiver](const absl::Status& why) { receiver.Abort(why); }, nullptr});
  control->SetState(MigrationState::kActive);
  // The source's FINISH arrived, or with post-copy its switch: a cancel
  // that came first wins (the session fails, and the source learns that
  // this side did not commit), none after it does.
  receiver.OnCommit([control] { return control->Commit(); });
  std::vector<std::unique_ptr<BackgroundPrefault>> background =
      StartBackgroundPrefaults(regions, prefault, receiver);
  on_listening(receiver.port());

  // Post-copy's workload: made now, started by the receiver's control
  // thread at the switch (starting threads is quick), stopped below.
  std::optional<Memload> load;
  std::atomic<bool> armed{false};
  absl::Time armed_at;  // written before `armed` is set
  if (report.workload) {
    // The first region's, as the source's memload writes its own first.
    load.emplace(static_cast<uint8_t*>(regions[0].base),
                 regions[0].page_count(), *workload, /*tracker=*/nullptr);
  }
  if (options.postcopy) {
    receiver.OnPostcopyArmed([&] {
      // The workload may run here from now on, unless a cancel came first
      // (the commit hook took the switch already, so none can now; this
      // asks again rather than rely on it): then nothing starts, and the
      // session is failing with the cancel.
      if (!control->Commit().ok()) return;
      armed_at = absl::Now();
      armed.store(true);
      if (load.has_value()) load->Start();
      control->SetState(MigrationState::kPostcopy);
      control->Publish("postcopy-armed", Json::object());
    });
  }

  const double cpu0 = cli::ProcessCpuSeconds();
  const absl::Time start = absl::Now();
  std::atomic<bool> done{false};
  std::thread progress_thread;
  if (progress) progress_thread = StartProgress(receiver, armed, load, done);
  std::thread round_events;
  if (watched) round_events = StartRoundEvents(receiver, *control, done);
  report.status = receiver.Serve();
  StopBackgroundPrefaults(background, report);
  report.page_faults = MinorFaults() - faults0;
  done.store(true);
  if (progress_thread.joinable()) progress_thread.join();
  if (round_events.joinable()) round_events.join();
  control->SetSession({});
  report.serve_s = absl::ToDoubleSeconds(absl::Now() - start);
  report.cpu_s = cli::ProcessCpuSeconds() - cpu0;
  report.rounds_applied = receiver.applied_rounds();
  report.pages_verified = receiver.verified_pages();
  report.verified = report.status.ok() && report.pages_verified == total_pages;
  report.stats = receiver.stats();
  report.postcopy_armed = armed.load();
  if (load.has_value()) StopWorkload(receiver, *load, armed_at, report);
  control->Finished(
      report.status,
      !control->cancelled().ok() || absl::IsCancelled(report.status),
      Json{{"rounds_applied", report.rounds_applied},
           {"bytes_received", report.stats.Total().payload_bytes},
           {"postcopy_armed", report.postcopy_armed}});
  return report;
}

}  // namespace ramferry::migrate
