#include "channels/transport_family.h"

#include "absl/strings/str_format.h"
#include "channels/rdma/rdma.h"
#include "channels/uring_zerocopy.h"
#include "proto/handshake.h"

namespace ramferry::channels {
namespace {

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
         kCapOwnsConnection | kCapAuthenticatedHello | kCapPinsSendMemory |
         kCapChunkedRegistration,
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

absl::StatusOr<proto::Hello> DecodeChannelHello(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::Hello> h = proto::DecodeHello(in);
  if (!h.ok()) return h;
  const TransportFamily* family = FindTransportFamily(h->transport);
  if (family == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown transport %d", h->transport));
  }
  const bool chunked = (family->capabilities & kCapChunkedRegistration) != 0;
  if (!chunked && h->rdma_chunk_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello reserved field (RDMA chunk bytes) is %d for transport %d; "
        "want 0",
        h->rdma_chunk_bytes, h->transport));
  }
  if (chunked && h->rdma_chunk_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello RDMA chunk bytes %d is not a power of two in [%d, %d]",
        h->rdma_chunk_bytes, proto::kMinRdmaChunkBytes,
        proto::kMaxRdmaChunkBytes));
  }
  return h;
}

}  // namespace ramferry::channels
