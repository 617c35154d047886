// uring-zc: io_uring zero-copy sends. Header and pages of a packet go in
// ONE IORING_OP_SENDMSG_ZC SQE, with the header in a rotating slot that is
// reused only after the send's notification CQE (IORING_CQE_F_NOTIF).
// Packets queued during a batch are submitted together, as one linked
// chain, in one io_uring_enter.
//
// Ordering: two sends in flight on one stream socket may complete out of
// order if one is punted to async, so every chain is linked
// (IOSQE_IO_LINK) and a new chain is submitted only after the previous
// chain's send CQEs arrived. A short send breaks the chain; the remainder
// and the cancelled sends are resubmitted, in order, as the next chain.
//
// With registered buffers, regions are registered in 1 GiB pieces and each
// contiguous page run goes as SEND_ZC with IORING_RECVSEND_FIXED_BUF; the
// header then goes ahead of it as a small copied SEND in the same chain.
#ifndef RAMFERRY_CHANNELS_URING_ZEROCOPY_H_
#define RAMFERRY_CHANNELS_URING_ZEROCOPY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "channels/transport.h"

namespace ramferry::channels {

// Whether this kernel can run uring-zc: io_uring enabled and SENDMSG_ZC,
// SEND_ZC supported. The error names the missing piece.
absl::Status ProbeUringZeroCopy();

// Takes ownership of the connected socket `fd` (closed on failure too).
absl::StatusOr<std::unique_ptr<Transport>> OpenUringZeroCopy(
    int fd, const TransportOptions& options);

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_URING_ZEROCOPY_H_
