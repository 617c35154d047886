// What a kind of transport is before any connection exists: its name on
// the command line and the wire, what every transport of the kind
// promises, and whether this machine can run it. The one table that maps a
// kind to its properties: the engine reads these bits, never the kind.
#ifndef RAMFERRY_CHANNELS_TRANSPORT_FAMILY_H_
#define RAMFERRY_CHANNELS_TRANSPORT_FAMILY_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "channels/transport.h"
#include "proto/handshake.h"
#include "ramferry/transport.h"

namespace ramferry::channels {

struct TransportFamily {
  TransportKind kind;
  absl::string_view name;
  // TransportCapability bits; every open transport of the kind returns
  // exactly these from capabilities() (the conformance suite checks).
  uint32_t capabilities;
  // OK where this machine can run the kind; the error says what is
  // missing. Null: always runs (plain sockets).
  absl::Status (*probe)();
  // What to run instead where the probe fails and the caller allows it;
  // nullopt: nothing can stand in.
  std::optional<TransportKind> fallback;
};

// Every kind this build has, in wire-id order.
absl::Span<const TransportFamily> TransportFamilies();

// The family of `kind`, or of a Hello's wire id; null for an unknown one
// (a peer may send anything).
const TransportFamily* FindTransportFamily(TransportKind kind);
const TransportFamily* FindTransportFamily(uint16_t wire_id);

// The capabilities of `kind`; 0 for an unknown one.
uint32_t StaticCapabilities(TransportKind kind);

// proto::DecodeHello, then what the Hello's transport promises: a family
// this build has, and a chunk size exactly where the family registers in
// chunks (kCapChunkedRegistration). Every listener decodes with it.
absl::StatusOr<proto::Hello> DecodeChannelHello(absl::Span<const uint8_t> in);

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_TRANSPORT_FAMILY_H_
