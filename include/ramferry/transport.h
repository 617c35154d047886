// Transport and completion-policy names shared by the public API and the
// transports themselves.
#ifndef RAMFERRY_TRANSPORT_H_
#define RAMFERRY_TRANSPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ramferry {

// How pages leave the source. Wire values (in the channel Hello) are fixed.
enum class TransportKind : uint16_t {
  kTcp = 1,            // sendmsg copies header + pages into the socket
  kTcpZeroCopy = 2,    // sendmsg(MSG_ZEROCOPY): the kernel pins the pages
  kUringZeroCopy = 3,  // io_uring SENDMSG_ZC
  kRdma = 4,           // RDMA WRITE of pages + SEND of the header
};

// When a zero-copy channel waits for the kernel to release its buffers.
enum class CompletionPolicy : uint8_t {
  kWrap,  // flush every completion when the header array wraps, and at sync
  kSlot,  // reap as it goes; block only for the slot about to be reused
  kEach,  // wait for each send's completion before the next (baseline)
};

absl::string_view TransportKindName(TransportKind kind);
absl::StatusOr<TransportKind> ParseTransportKind(absl::string_view name);
bool IsZeroCopy(TransportKind kind);

// A transport chosen for a peer, and why.
struct TransportChoice {
  TransportKind kind = TransportKind::kTcp;
  std::string reason;
};

// Chooses how to reach `host`. A peer on this host gets the copying
// transport: loopback delivery copies every zero-copy payload anyway (and
// zero-copy then only adds completion work). A peer behind a NIC gets
// zero-copy: uring-zc where this kernel has it, else tcp-zerocopy.
absl::StatusOr<TransportChoice> ChooseTransport(const std::string& host);

absl::string_view CompletionPolicyName(CompletionPolicy policy);
absl::StatusOr<CompletionPolicy> ParseCompletionPolicy(absl::string_view name);

}  // namespace ramferry

#endif  // RAMFERRY_TRANSPORT_H_
