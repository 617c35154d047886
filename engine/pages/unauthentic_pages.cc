#include "engine/pages/unauthentic_pages.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_format.h"

namespace ramferry::engine {

UnauthenticPages::UnauthenticPages(absl::Span<const Region> regions) {
  for (const Region& r : regions) {
    region_ids_.push_back(r.id);
    page_counts_.push_back(r.page_count());
  }
}

void UnauthenticPages::Mark(size_t index, uint64_t first, uint64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  // Numbered after every read that began before it: their Clear keeps it.
  const uint64_t epoch = epoch_.fetch_add(1, std::memory_order_seq_cst) + 1;
  const uint64_t end = std::min(page_counts_[index], first + count);
  for (uint64_t p = first; p < end; ++p) marked_[Key(index, p)] = epoch;
  count_.store(marked_.size(), std::memory_order_release);
}

void UnauthenticPages::Clear(size_t index, uint64_t first, uint64_t count,
                             uint64_t epoch) {
  if (count_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t end = std::min(page_counts_[index], first + count);
  for (uint64_t p = first; p < end; ++p) {
    auto it = marked_.find(Key(index, p));
    if (it != marked_.end() && it->second <= epoch) marked_.erase(it);
  }
  count_.store(marked_.size(), std::memory_order_release);
}

bool UnauthenticPages::Test(size_t index, uint64_t page) const {
  if (count() == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return marked_.contains(Key(index, page));
}

absl::Status UnauthenticPages::CheckEmpty(absl::string_view when) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (marked_.empty()) return absl::OkStatus();
  uint64_t first = std::numeric_limits<uint64_t>::max();
  for (const auto& [key, epoch] : marked_) first = std::min(first, key);
  const size_t index = first >> 40;
  return absl::FailedPreconditionError(absl::StrFormat(
      "%d pages (the first: page %d of region %d) hold bytes of a payload "
      "whose tag never checked out (cut mid-payload, or forged) and no "
      "authentic copy came since, so %s without them being right; the "
      "stream was tampered with or a lost channel's packet was not sent "
      "again",
      marked_.size(), first & ((uint64_t{1} << 40) - 1), region_ids_[index],
      when));
}

}  // namespace ramferry::engine
