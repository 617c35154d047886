// RDMA channels: whether this machine has a device, and what a channel's
// buffers take. The two ends are rdma/source.cc and rdma/destination.cc
// over rdma/transport_base.h; what they stand on: rdma_connection (verbs
// objects, the CM steps, the listener), rdma_queue (posts, completions,
// receives, control sends) and rdma_registration (which chunks need keys,
// which go as COMPRESS).
#include "channels/rdma/rdma.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdint>

#include "channels/rdma/queue.h"
#include "proto/rdma_control.h"

namespace ramferry::channels {

absl::Status ProbeRdma() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list != nullptr) ibv_free_device_list(list);
  if (n == 0) {
    return absl::FailedPreconditionError(
        "no RDMA device (ibv_get_device_list found none); add an RDMA NIC "
        "or a Soft-RoCE device (rdma link add rxe0 type rxe netdev eth0), "
        "or choose a TCP transport");
  }
  return absl::OkStatus();
}

uint64_t RdmaChannelBufferBytes(uint64_t max_header_bytes) {
  const uint64_t message =
      std::max<uint64_t>(max_header_bytes, proto::RdmaControlMaxBytes());
  return RdmaConfig{}.recv_queue * message +
         RdmaQueue::kControlBuffers * proto::RdmaControlMaxBytes();
}

}  // namespace ramferry::channels
