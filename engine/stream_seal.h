// Which seal mode (proto/seal.h) a session runs with, and the sealers its
// ends build from a connection's keys. The destination insists on at least
// its own mode; both ends then use the mode the source's Hello asked for.
#ifndef RAMFERRY_ENGINE_STREAM_SEAL_H_
#define RAMFERRY_ENGINE_STREAM_SEAL_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/control.h"
#include "proto/seal.h"
#include "ramferry/options.h"

namespace ramferry::engine {

// `options.protect` resolved for a transport with `transport_caps`
// (channels::TransportCapability): kAuto is kMac with a key, unless the
// transport places pages itself (kCapRemotePlacement), and kNone without.
proto::SealMode SealModeFor(const SessionOptions& options,
                            uint32_t transport_caps);

// Whether a source asking for `asked` meets a destination that wants at
// least `wanted` (kEncrypt > kMac > kNone).
bool SealModeSatisfies(proto::SealMode asked, proto::SealMode wanted);

enum class SealEnd { kSource, kDestination };

// The sealer of one data channel's packets at `end`: it seals them at the
// source and opens them at the destination. Null for kNone; an error where
// the session is sealed but the connection has no keys (`keys` null: it
// proved no key).
absl::StatusOr<std::unique_ptr<proto::Sealer>> MakeChannelSealer(
    proto::SealMode mode, const proto::SealKeys* keys, SealEnd end);

// Seals `control` as `end` of it: what it sends under its own direction's
// key, what it receives under the other's. Nothing for kNone.
absl::Status SealControl(proto::SealMode mode, const proto::SealKeys* keys,
                         SealEnd end, ControlChannel& control);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_STREAM_SEAL_H_
