// Which transports a test runs on, and whether each can run here: the
// lists come from the family table by capability, so a new transport is
// tested wherever its bits say it belongs.
#ifndef RAMFERRY_TESTS_SUPPORT_TRANSPORT_SELECTION_H_
#define RAMFERRY_TESTS_SUPPORT_TRANSPORT_SELECTION_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ramferry/options.h"
#include "ramferry/transport.h"

namespace ramferry {
// Readable parameters in gtest's output and ctest's test names.
inline void PrintTo(TransportKind kind, std::ostream* os) {
  *os << TransportKindName(kind);
}
inline void PrintTo(CompletionPolicy policy, std::ostream* os) {
  *os << CompletionPolicyName(policy);
}
}  // namespace ramferry

namespace ramferry::testing {

// Every kind this build has whose capabilities include all of `all_of`
// and none of `none_of` (channels::TransportCapability bits), whether or
// not it runs here: WhyUnavailable() decides what to skip.
std::vector<TransportKind> TransportsWith(uint32_t all_of,
                                          uint32_t none_of = 0);

// "uring-zc" -> "uring_zc": a valid gtest name part.
std::string TestName(TransportKind kind);
std::string TestName(CompletionPolicy policy);

// Empty when `kind` can run here; otherwise why not, for GTEST_SKIP:
// uring-zc where the io_uring probe fails; rdma where its probe finds no
// RDMA device (a session fails with FAILED_PRECONDITION) or RXE_IP does
// not name the device's address. Any other failure is not a reason to skip: the
// tests then run, and fail, loudly.
std::string WhyUnavailable(TransportKind kind);

// RDMA cannot use 127.0.0.1: its sessions and pairs use the address of
// the RDMA device, $RXE_IP (set in the Soft-RoCE VM, tests/rdma_vm). Empty
// when unset.
std::string RdmaHost();
// Points `opt` at RdmaHost() when it is an rdma session and RXE_IP is set;
// leaves every other session on its loopback default.
void UseTransportHost(SessionOptions& opt);

}  // namespace ramferry::testing

#endif  // RAMFERRY_TESTS_SUPPORT_TRANSPORT_SELECTION_H_
