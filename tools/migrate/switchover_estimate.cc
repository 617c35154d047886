#include "tools/migrate/switchover_estimate.h"

#include <algorithm>

namespace ramferry::migrate {

void SwitchoverEstimate::NoteCollect(double seconds, uint64_t pages) {
  last_collect_s_ = seconds;
  last_collect_pages_ = pages;
}

void SwitchoverEstimate::NotePause(double seconds) {
  pause_s_ = std::max(pause_s_.value_or(0), seconds);
}

double SwitchoverEstimate::collect_s(uint64_t pages) const {
  // Write-protecting and reporting each dirty page is most of a
  // collection's cost: more pages, longer, in proportion.
  if (last_collect_pages_ == 0 || pages <= last_collect_pages_) {
    return last_collect_s_;
  }
  return last_collect_s_ * static_cast<double>(pages) /
         static_cast<double>(last_collect_pages_);
}

std::optional<double> SwitchoverEstimate::FinalRoundSeconds(
    uint64_t pages) const {
  return link_.RoundSeconds(pages * page_bytes_);
}

std::optional<double> SwitchoverEstimate::Before(
    uint64_t pending_pages, double dirty_pages_per_s) const {
  // Round 0 goes in region order; the pages a final round re-sends are
  // scattered, and a small round's fixed cost is its own: neither is
  // known before a round of re-sends was measured.
  if (link_.rounds() < 2) return std::nullopt;
  // Until the pause holds and the collection ran, the workload goes on
  // dirtying pages (some of them dirty already: counted twice, so the
  // estimate errs long).
  const double gap_s = pause_s() + collect_s(pending_pages);
  const uint64_t more =
      static_cast<uint64_t>(std::max(0.0, dirty_pages_per_s) * gap_s);
  const uint64_t pages = std::min(region_pages_, pending_pages + more);
  // A round far smaller than any measured is mostly fixed cost (the
  // barrier, a zero-copy flush), which no measured round shows: one more
  // live round, about its size, measures it first.
  if (pages * page_bytes_ * kLargerThanMeasured <
      link_.smallest_round_bytes()) {
    return std::nullopt;
  }
  const std::optional<double> round = FinalRoundSeconds(pages);
  if (!round) return std::nullopt;
  return pause_s() + collect_s(pages) + *round;
}

std::optional<double> SwitchoverEstimate::Paused(double elapsed_s,
                                                 uint64_t final_pages) const {
  const std::optional<double> round = FinalRoundSeconds(final_pages);
  if (!round) return std::nullopt;
  return elapsed_s + *round;
}

uint64_t SwitchoverEstimate::ProbePages(uint64_t final_pages,
                                        std::optional<double> paused,
                                        double limit_s) const {
  if (final_pages * page_bytes_ < kProbeFromBytes) return 0;
  if (paused && limit_s > 0 && *paused > kHopelessOverLimit * limit_s) {
    return 0;
  }
  return final_pages / 4;
}

double SwitchoverEstimate::AfterProbe(double elapsed_s, uint64_t probe_pages,
                                      double probe_s,
                                      uint64_t rest_pages) const {
  if (probe_pages == 0) return elapsed_s + probe_s;
  const double fixed_s = std::min(link_.RoundTripSeconds(), probe_s / 2);
  const double per_page_s =
      (probe_s - fixed_s) / static_cast<double>(probe_pages);
  return elapsed_s + fixed_s + per_page_s * static_cast<double>(rest_pages);
}

}  // namespace ramferry::migrate
