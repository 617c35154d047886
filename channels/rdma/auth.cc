#include "channels/rdma/auth.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "proto/wire.h"

namespace ramferry::channels {

std::vector<uint8_t> EncodeRdmaAccept(const RdmaAccept& accept) {
  std::vector<uint8_t> out(accept.challenge.has_value()
                               ? kRdmaKeyedAcceptBytes
                               : proto::kHelloReplyBytes);
  proto::EncodeHelloReply(accept.reply, absl::MakeSpan(out));
  if (accept.challenge.has_value()) {
    proto::EncodeAuthChallenge(*accept.challenge, absl::MakeSpan(out).subspan(
                                                      proto::kHelloReplyBytes));
  }
  return out;
}

absl::StatusOr<RdmaAccept> DecodeRdmaAccept(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::HelloReply> reply = proto::DecodeHelloReply(in);
  if (!reply.ok()) return reply.status();
  RdmaAccept accept{*std::move(reply), std::nullopt};
  const absl::Span<const uint8_t> rest = in.subspan(proto::kHelloReplyBytes);
  if (std::all_of(rest.begin(), rest.end(), [](uint8_t b) { return b == 0; })) {
    return accept;  // no challenge; the CM's padding, if any
  }
  if (rest.size() < 4 ||
      proto::Load32(rest.data()) != proto::kAuthChallengeMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the destination's accept carries %d bytes after its reply that are "
        "not an auth challenge",
        rest.size()));
  }
  absl::StatusOr<proto::AuthChallenge> challenge =
      proto::DecodeAuthChallenge(rest);
  if (!challenge.ok()) return challenge.status();
  accept.challenge = *challenge;
  return accept;
}

absl::Status CheckHelloAuth(bool keyed, uint16_t auth) {
  if (keyed && auth != proto::kAuthHmacSha256) {
    return absl::UnauthenticatedError(
        "destination requires authentication: give the source the same key");
  }
  if (!keyed && auth != proto::kAuthNone) {
    return absl::UnauthenticatedError(
        "destination has no key, so it cannot authenticate; give both ends "
        "the same key");
  }
  return absl::OkStatus();
}

RdmaSourceChallenge ChallengeSource(absl::string_view key,
                                    absl::Span<const uint8_t> hello) {
  RdmaSourceChallenge c;
  c.challenge.nonce = proto::NewAuthNonce();
  c.challenge.proof = proto::ComputeAuthMac(key, proto::AuthSide::kDestination,
                                            hello, c.challenge.nonce);
  c.expected = proto::ComputeAuthMac(key, proto::AuthSide::kSource, hello,
                                     c.challenge.nonce);
  return c;
}

absl::Status CheckDestination(absl::string_view key,
                              absl::Span<const uint8_t> hello,
                              const RdmaAccept& accept) {
  if (key.empty()) {
    if (accept.challenge.has_value()) {
      return absl::UnauthenticatedError(
          "destination demands authentication: give the source the "
          "destination's key");
    }
    return absl::OkStatus();
  }
  // Fail closed: with a key, an unauthenticated destination gets nothing.
  if (!accept.challenge.has_value()) {
    return absl::UnauthenticatedError(
        "destination accepted without proving it holds the key; refusing to "
        "send it memory");
  }
  const proto::AuthMac expected = proto::ComputeAuthMac(
      key, proto::AuthSide::kDestination, hello, accept.challenge->nonce);
  if (!proto::AuthMacEquals(expected, accept.challenge->proof)) {
    return absl::UnauthenticatedError(
        "destination failed to prove it holds the key (a different key, or "
        "not the destination meant); nothing was sent");
  }
  return absl::OkStatus();
}

std::array<uint8_t, proto::kAuthProofBytes> SourceProof(
    absl::string_view key, absl::Span<const uint8_t> hello,
    const proto::AuthChallenge& challenge) {
  proto::AuthProof proof;
  proof.proof = proto::ComputeAuthMac(key, proto::AuthSide::kSource, hello,
                                      challenge.nonce);
  std::array<uint8_t, proto::kAuthProofBytes> out;
  proto::EncodeAuthProof(proof, absl::MakeSpan(out));
  return out;
}

absl::Status CheckSourceProof(absl::Span<const uint8_t> message,
                              const proto::AuthMac& expected) {
  if (message.size() != proto::kAuthProofBytes) {
    return absl::UnauthenticatedError(absl::StrFormat(
        "authentication failed: the source's first message is %d bytes, not "
        "a %d-byte proof (a source without the key, or not a ramferry "
        "source)",
        message.size(), proto::kAuthProofBytes));
  }
  absl::StatusOr<proto::AuthProof> proof = proto::DecodeAuthProof(message);
  if (!proof.ok()) {
    return absl::UnauthenticatedError(
        absl::StrFormat("authentication failed: the source's first message "
                        "is not a proof: %s",
                        proof.status().message()));
  }
  if (!proto::AuthMacEquals(expected, proof->proof)) {
    return absl::UnauthenticatedError(
        "authentication failed: the source's proof does not match (it holds "
        "a different key); give both ends the same key");
  }
  return absl::OkStatus();
}

}  // namespace ramferry::channels
