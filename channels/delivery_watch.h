// Whether the bytes a channel handed to its link are being taken, judged
// from looks taken while the channel sends nothing. A blocked send judges
// itself (socket_io's SendAll); a send that returned has only put its
// bytes in the kernel's queue. If the link dies under the last packets of
// a round, no send is blocked, the destination waits at a packet boundary
// (where a peer may idle), and without this nothing would ever notice.
//
// A look gives the bytes still undelivered (for TCP, sent but not
// acknowledged, or not yet sent) and the transport's count of sends. The
// watch fails once the same nonzero undelivered count, with no send
// between, has stood for the stall timeout: no byte moved in either
// direction. A send restarts the watch, so a count that returns to the
// same value across rounds is never taken for one that stood still.
//
// Pure: the caller passes the time.
#ifndef RAMFERRY_CHANNELS_DELIVERY_WATCH_H_
#define RAMFERRY_CHANNELS_DELIVERY_WATCH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace ramferry::channels {

class DeliveryWatch {
 public:
  explicit DeliveryWatch(absl::Duration stall) : stall_(stall) {}

  // DEADLINE_EXCEEDED once `undelivered` bytes, unchanged and nonzero,
  // with `sends` unchanged, have stood since a look at least the stall
  // timeout before `now`; OK otherwise.
  absl::Status Look(uint64_t undelivered, uint64_t sends, absl::Time now);

 private:
  const absl::Duration stall_;
  bool watching_ = false;  // a nonzero count is standing since `since_`
  uint64_t undelivered_ = 0;
  uint64_t sends_ = 0;
  absl::Time since_;
};

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_DELIVERY_WATCH_H_
