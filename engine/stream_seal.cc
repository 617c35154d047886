#include "engine/stream_seal.h"

#include "channels/transport.h"

namespace ramferry::engine {

proto::SealMode SealModeFor(const SessionOptions& options,
                            uint32_t transport_caps) {
  switch (options.protect) {
    case Protection::kAuto:
      return !options.auth_key.empty() &&
                     (transport_caps & channels::kCapRemotePlacement) == 0
                 ? proto::SealMode::kMac
                 : proto::SealMode::kNone;
    case Protection::kNone:
      return proto::SealMode::kNone;
    case Protection::kMac:
      return proto::SealMode::kMac;
    case Protection::kEncrypt:
      return proto::SealMode::kEncrypt;
  }
  return proto::SealMode::kNone;
}

bool SealModeSatisfies(proto::SealMode asked, proto::SealMode wanted) {
  return static_cast<int>(asked) >= static_cast<int>(wanted);
}

absl::StatusOr<std::unique_ptr<proto::Sealer>> MakeSealer(
    proto::SealMode mode, const proto::SealKey& key, proto::Sealer::Use use) {
  if (mode == proto::SealMode::kNone) {
    return std::unique_ptr<proto::Sealer>();
  }
  return proto::Sealer::Create(mode, key, use);
}

}  // namespace ramferry::engine
