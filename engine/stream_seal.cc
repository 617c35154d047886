#include "engine/stream_seal.h"

#include "base/status_macros.h"
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

namespace {

// The key of what `from` sends.
const proto::SealKey& KeyFrom(const proto::SealKeys& keys, SealEnd from) {
  return from == SealEnd::kSource ? keys.to_destination : keys.to_source;
}

SealEnd Peer(SealEnd end) {
  return end == SealEnd::kSource ? SealEnd::kDestination : SealEnd::kSource;
}

absl::Status NeedKeys(proto::SealMode mode, const proto::SealKeys* keys) {
  if (mode != proto::SealMode::kNone && keys == nullptr) {
    return absl::InternalError(
        "sealed session on a connection that proved no key");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<proto::Sealer>> MakeChannelSealer(
    proto::SealMode mode, const proto::SealKeys* keys, SealEnd end) {
  RAMFERRY_RETURN_IF_ERROR(NeedKeys(mode, keys));
  if (mode == proto::SealMode::kNone) return std::unique_ptr<proto::Sealer>();
  // Packets go one way only: from the source.
  return proto::Sealer::Create(mode, keys->to_destination,
                               end == SealEnd::kSource
                                   ? proto::Sealer::Use::kSeal
                                   : proto::Sealer::Use::kOpen);
}

absl::Status SealControl(proto::SealMode mode, const proto::SealKeys* keys,
                         SealEnd end, ControlChannel& control) {
  RAMFERRY_RETURN_IF_ERROR(NeedKeys(mode, keys));
  if (mode == proto::SealMode::kNone) return absl::OkStatus();
  RAMFERRY_ASSIGN_OR_RETURN(std::unique_ptr<proto::Sealer> send,
                            proto::Sealer::Create(mode, KeyFrom(*keys, end),
                                                  proto::Sealer::Use::kSeal));
  RAMFERRY_ASSIGN_OR_RETURN(
      std::unique_ptr<proto::Sealer> receive,
      proto::Sealer::Create(mode, KeyFrom(*keys, Peer(end)),
                            proto::Sealer::Use::kOpen));
  control.Seal(std::move(send), std::move(receive));
  return absl::OkStatus();
}

}  // namespace ramferry::engine
