#include "tests/support/transport_selection.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "channels/rdma/rdma.h"
#include "channels/transport_family.h"
#include "channels/uring_zerocopy.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/test_support.h"

namespace ramferry::testing {

std::vector<TransportKind> TransportsWith(uint32_t all_of, uint32_t none_of) {
  std::vector<TransportKind> kinds;
  for (const channels::TransportFamily& f : channels::TransportFamilies()) {
    if ((f.capabilities & all_of) == all_of &&
        (f.capabilities & none_of) == 0) {
      kinds.push_back(f.kind);
    }
  }
  return kinds;
}

std::string TestName(TransportKind kind) {
  std::string name(TransportKindName(kind));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

std::string TestName(CompletionPolicy policy) {
  return std::string(CompletionPolicyName(policy));
}

std::string RdmaHost() {
  const char* ip = std::getenv("RXE_IP");
  return ip != nullptr ? std::string(ip) : std::string();
}

void UseTransportHost(SessionOptions& opt) {
  if (opt.transport != TransportKind::kRdma) return;
  if (std::string host = RdmaHost(); !host.empty()) opt.host = host;
}

namespace {

// A one-channel rdma session against a local destination, opened the way a
// user opens one: OK when rdma runs here.
absl::Status OpenRdmaSession() {
  TestRegion src = MakeRegion(1, 1 << 20, 1, /*fill=*/true);
  TestRegion dst = MakeRegion(1, 1 << 20);
  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  opt.transport = TransportKind::kRdma;
  UseTransportHost(opt);
  opt.channels = 1;
  opt.connect_timeout = absl::Seconds(5);
  opt.handshake_timeout = absl::Seconds(5);
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  RAMFERRY_ASSIGN_OR_RETURN(std::unique_ptr<Sender> sender,
                            Sender::Connect(opt, {&src.region, 1}));
  return sender->Finish();
}

std::string WhyRdmaUnavailable() {
  // A device but no address for it: 127.0.0.1 cannot carry RDMA, so the
  // tests could only fail. Say so instead (they run in tests/rdma_vm).
  if (channels::ProbeRdma().ok() && RdmaHost().empty()) {
    return "rdma needs the RDMA device's address in RXE_IP (127.0.0.1 "
           "cannot carry RDMA); run the suite in tests/rdma_vm, which sets "
           "it";
  }
  const absl::Status session = OpenRdmaSession();
  if (session.ok()) return "";
  // The transport's own probe said no (no RDMA device here).
  if (absl::IsFailedPrecondition(session)) {
    return absl::StrCat("rdma cannot run on this machine: ", session.message());
  }
  // Built but failing: the tests run, and fail with the cause.
  return "";
}

}  // namespace

std::string WhyUnavailable(TransportKind kind) {
  switch (kind) {
    case TransportKind::kUringZeroCopy: {
      absl::Status probe = channels::ProbeUringZeroCopy();
      if (probe.ok()) return "";
      return absl::StrCat("uring-zc cannot run on this kernel: ",
                          probe.message());
    }
    case TransportKind::kRdma: {
      // Once per process: it runs a session.
      static const std::string* why = new std::string(WhyRdmaUnavailable());
      return *why;
    }
    default:
      return "";
  }
}

}  // namespace ramferry::testing
