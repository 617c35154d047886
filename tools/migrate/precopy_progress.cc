#include "tools/migrate/precopy_progress.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "ramferry/region.h"

namespace ramferry::migrate {

void ProgressThread::Run(const LiveState& s) {
  const Sender* current = s.sender.load();
  uint64_t last_bytes = current->stats().Total().payload_bytes;
  absl::Time last = absl::Now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::milliseconds(250),
                       [&] { return stop_; })) {
    if (const Sender* now_sender = s.sender.load(); now_sender != current) {
      current = now_sender;  // resumed: its counters start afresh
      last_bytes = 0;
    }
    const Sender& sender = *current;
    const ChannelStats t = sender.stats().Total();
    const absl::Time now = absl::Now();
    const double rate =
        (t.payload_bytes - last_bytes) / absl::ToDoubleSeconds(now - last);
    last_bytes = t.payload_bytes;
    last = now;
    if (s.postcopy.load()) {
      const PostcopyStats p = sender.stats().postcopy;
      const uint64_t in =
          std::min(p.missing_pages, p.urgent_pages + p.pushed_pages);
      line_.Update(absl::StrFormat(
          "post-copy  %3.0f%% of %s missing  %s  %d pages requested",
          p.missing_pages ? 100.0 * in / p.missing_pages : 100.0,
          cli::FormatBytes(p.missing_pages * kPageSize), cli::FormatRate(rate),
          p.requested_pages));
      continue;
    }
    const uint64_t total = s.round_pages.load();
    const uint64_t done =
        std::min(total, t.pages - s.pages_before_round.load());
    line_.Update(absl::StrFormat(
        "round %d%s  %3.0f%% of %s  %s  dirty %s/s%s  est. "
        "downtime %.0f ms",
        s.round.load(), s.final_round.load() ? " (final)" : "",
        total ? 100.0 * done / total : 100.0,
        cli::FormatBytes(total * kPageSize), cli::FormatRate(rate),
        cli::FormatBytes(
            static_cast<uint64_t>(LiveState::Value(s.dirty_rate_bits)) *
            kPageSize),
        s.throttle.load() > 0
            ? absl::StrFormat(" (throttled %d%%)", s.throttle.load())
            : "",
        LiveState::Value(s.estimate_bits) * 1e3));
  }
}

}  // namespace ramferry::migrate
