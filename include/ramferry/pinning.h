// Zero-copy sends pin the pages they carry, and registered memory (rdma's,
// io_uring's fixed buffers) is pinned while registered, charged to
// RLIMIT_MEMLOCK (unless the process has CAP_IPC_LOCK); each outstanding
// socket zero-copy send holds a notification in the socket's option memory
// (net.core.optmem_max). Users
// most often meet zero-copy as a mid-migration ENOBUFS; checking up front
// turns that into a clear refusal with the number to raise.
#ifndef RAMFERRY_PINNING_H_
#define RAMFERRY_PINNING_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "ramferry/options.h"

namespace ramferry {

struct PinningNeeds {
  uint64_t memlock_bytes = 0;    // pinned at most, all channels
  uint64_t optmem_bytes = 0;     // per socket, at most
  uint64_t sends_in_flight = 0;  // per channel, at most
  std::string explanation;       // how the numbers were reached
};

// What `options` can pin and hold for `region_bytes` of regions, given the
// kernel's socket buffer limit (net.ipv4.tcp_wmem max): the kernel cannot
// hold more unsent/unacked data per socket than that, however many header
// slots are free. A transport that registers the regions with its device
// (rdma, on both ends) or as fixed buffers (uring-zc with
// registered_buffers) pins them once per channel.
PinningNeeds ComputePinningNeeds(const SessionOptions& options,
                                 uint64_t page_size, uint64_t sndbuf_max,
                                 uint64_t region_bytes);

// ComputePinningNeeds with this kernel's socket send buffer limit.
PinningNeeds EstimatePinning(const SessionOptions& options, uint64_t page_size,
                             uint64_t region_bytes);

// Reads the limits of this process and kernel and refuses, with the exact
// numbers and how to raise them, when the transport could hit them. OK for
// copying transports.
absl::Status CheckPinningLimits(const SessionOptions& options,
                                uint64_t page_size, uint64_t region_bytes);

}  // namespace ramferry

#endif  // RAMFERRY_PINNING_H_
