#include "channels/rdma/credits.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ramferry::channels {

void SendCredits::Take(uint32_t sends) {
  if (counted_) available_ -= sends;
}

absl::Status SendCredits::Grant(uint32_t credits) {
  if (!counted_) {
    return absl::InvalidArgumentError(
        "RDMA credits from a destination that did not negotiate them");
  }
  if (credits == 0) {
    return absl::InvalidArgumentError("RDMA credits message grants none");
  }
  if (window_ == 0) {
    window_ = credits;
    available_ = credits;
    return absl::OkStatus();
  }
  if (credits > in_use()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the destination returned %d receive credits with %d in use (of %d)",
        credits, in_use(), window_));
  }
  available_ += credits;
  return absl::OkStatus();
}

CreditReturn::CreditReturn(uint32_t window)
    : window_(window), batch_(std::max<uint32_t>(window / 8, 1)) {}

uint32_t CreditReturn::TakeDue() {
  if (pending_ < batch_) return 0;
  const uint32_t due = pending_;
  pending_ = 0;
  return due;
}

}  // namespace ramferry::channels
