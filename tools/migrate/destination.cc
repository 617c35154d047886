#include "tools/migrate/destination.h"

#include <atomic>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "ramferry/receiver.h"
#include "tools/common/cli.h"

namespace ramferry::migrate {

DestinationReport RunDestination(
    const SessionOptions& options, const Region& region, bool prefault,
    bool progress, const std::function<void(uint16_t)>& on_listening) {
  DestinationReport report;
  // First-touch faults cost ~10x a warm write here: take them before any
  // data arrives, on both cores.
  if (prefault) {
    const absl::Time t = absl::Now();
    report.status = PrefaultForWrite(region.base, region.length, 2);
    report.prefault_s = absl::ToDoubleSeconds(absl::Now() - t);
    if (!report.status.ok()) return report;
  }
  absl::StatusOr<std::unique_ptr<Receiver>> rx =
      Receiver::Listen(options, {&region, 1});
  if (!rx.ok()) {
    report.status = rx.status();
    return report;
  }
  Receiver& receiver = **rx;
  on_listening(receiver.port());

  const double cpu0 = cli::ProcessCpuSeconds();
  const absl::Time start = absl::Now();
  std::atomic<bool> done{false};
  std::thread progress_thread;
  if (progress) {
    progress_thread = std::thread([&] {
      cli::ProgressLine line(true, 1.0);
      while (!done.load()) {
        const ChannelStats t = receiver.stats().Total();
        line.Update(absl::StrFormat("destination: %d rounds applied, %s in",
                                    receiver.applied_rounds(),
                                    cli::FormatBytes(t.payload_bytes)));
        absl::SleepFor(absl::Milliseconds(250));
      }
    });
  }
  report.status = receiver.Serve();
  done.store(true);
  if (progress_thread.joinable()) progress_thread.join();
  report.serve_s = absl::ToDoubleSeconds(absl::Now() - start);
  report.cpu_s = cli::ProcessCpuSeconds() - cpu0;
  report.rounds_applied = receiver.applied_rounds();
  report.pages_verified = receiver.verified_pages();
  report.verified =
      report.status.ok() && report.pages_verified == region.page_count();
  report.stats = receiver.stats();
  return report;
}

}  // namespace ramferry::migrate
