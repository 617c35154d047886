// tcp-zerocopy: SO_ZEROCOPY + sendmsg(MSG_ZEROCOPY). Header and pages leave
// in ONE send; the kernel pins the pages and reports on the socket's error
// queue when it let go of them, as ranges of per-call ids. Headers rotate
// through HeaderSlots so a header is not rewritten while the kernel may
// still read it.
//
// On loopback the kernel copies at delivery anyway and flags every
// completion SO_EE_CODE_ZEROCOPY_COPIED; those are counted (zc_copied),
// not hidden.
#ifndef RAMFERRY_CHANNELS_TCP_ZEROCOPY_H_
#define RAMFERRY_CHANNELS_TCP_ZEROCOPY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "channels/transport.h"

namespace ramferry::channels {

// Takes ownership of the connected socket `fd` (closed on failure too).
// Fails if the kernel refuses SO_ZEROCOPY.
absl::StatusOr<std::unique_ptr<Transport>> OpenTcpZeroCopy(
    int fd, const TransportOptions& options);

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_TCP_ZEROCOPY_H_
