// Which seal mode (proto/seal.h) a session runs with, and the sealers its
// ends build from a connection's keys. The destination insists on at least
// its own mode; both ends then use the mode the source's Hello asked for.
#ifndef RAMFERRY_ENGINE_STREAM_SEAL_H_
#define RAMFERRY_ENGINE_STREAM_SEAL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
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

// The sealer for the direction `key` keys, at its sending (kSeal) or
// receiving (kOpen) end; null for kNone.
absl::StatusOr<std::unique_ptr<proto::Sealer>> MakeSealer(
    proto::SealMode mode, const proto::SealKey& key, proto::Sealer::Use use);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_STREAM_SEAL_H_
