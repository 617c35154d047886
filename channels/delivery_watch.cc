#include "channels/delivery_watch.h"

#include "absl/strings/str_format.h"

namespace ramferry::channels {

absl::Status DeliveryWatch::Look(uint64_t undelivered, uint64_t sends,
                                 absl::Time now) {
  if (!watching_ || undelivered != undelivered_ || sends != sends_) {
    watching_ = undelivered != 0;
    undelivered_ = undelivered;
    sends_ = sends;
    since_ = now;
    return absl::OkStatus();
  }
  if (now - since_ < stall_) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrFormat(
      "%d bytes sent have waited %s for the peer to take them, with nothing "
      "sent since: the link or the peer is down (stall timeout %s)",
      undelivered, absl::FormatDuration(now - since_),
      absl::FormatDuration(stall_)));
}

}  // namespace ramferry::channels
