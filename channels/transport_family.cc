#include "channels/transport_family.h"

#include "channels/rdma.h"
#include "channels/uring_zerocopy.h"
#include "proto/handshake.h"

namespace ramferry::channels {
namespace {

// The Hello's codec checks rdma's chunk-size field by this wire id.
static_assert(proto::kRdmaTransportId ==
              static_cast<uint16_t>(TransportKind::kRdma));

constexpr uint32_t kSocketCaps = kCapAuthenticatedHello;
constexpr uint32_t kZeroCopySocketCaps =
    kSocketCaps | kCapZeroCopy | kCapHeaderSlots | kCapCompletionPolicies |
    kCapPinsSendMemory;

constexpr TransportFamily kFamilies[] = {
    {TransportKind::kTcp, "tcp", kSocketCaps, nullptr, std::nullopt},
    {TransportKind::kTcpZeroCopy, "tcp-zerocopy", kZeroCopySocketCaps, nullptr,
     std::nullopt},
    {TransportKind::kUringZeroCopy, "uring-zc",
     kZeroCopySocketCaps | kCapRegisteredBuffers | kCapBatchedSubmit,
     &ProbeUringZeroCopy, TransportKind::kTcpZeroCopy},
    {TransportKind::kRdma, "rdma",
     kCapZeroCopy | kCapHeaderSlots | kCapCompletionPolicies |
         kCapRegisteredBuffers | kCapInlineSends | kCapRemotePlacement |
         kCapOwnsConnection | kCapPinsSendMemory | kCapChunkedRegistration,
     &ProbeRdma, std::nullopt},
};

}  // namespace

absl::Span<const TransportFamily> TransportFamilies() { return kFamilies; }

const TransportFamily* FindTransportFamily(TransportKind kind) {
  for (const TransportFamily& f : kFamilies) {
    if (f.kind == kind) return &f;
  }
  return nullptr;
}

const TransportFamily* FindTransportFamily(uint16_t wire_id) {
  return FindTransportFamily(static_cast<TransportKind>(wire_id));
}

uint32_t StaticCapabilities(TransportKind kind) {
  const TransportFamily* f = FindTransportFamily(kind);
  return f == nullptr ? 0 : f->capabilities;
}

}  // namespace ramferry::channels
