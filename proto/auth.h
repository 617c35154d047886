// Pre-shared-key authentication of a connection, right after its Hello and
// before the destination admits it: HMAC-SHA256 challenge-response, each
// side proving it holds the key.
//
//   source -> destination   Hello (auth = kAuthHmacSha256)
//   destination -> source   AuthChallenge: a fresh nonce and the
//                           destination's proof over (Hello, nonce)
//   source -> destination   AuthProof: the source's proof over (Hello, nonce)
//   destination -> source   HelloReply (accepted, or refused with a reason)
//
// Both proofs cover the whole Hello, so they are bound to the session id
// (fresh and random per session: the source's nonce), the channel index and
// every parameter; the destination's nonce makes a recorded source proof
// useless on a new connection. The two sides use different labels, so a
// proof cannot be reflected back. This authenticates the connection; what
// flows after it is protected by the stream seal (proto/seal.h: a tag on
// every message, or encryption too), which the session negotiates and
// keys from the same secret, unless it runs with protection none.
//
// AuthChallenge (64 bytes, big-endian):
//    0 u32 magic 'RFAC'   4 u16 version   6 u16 method (1)
//    8 u8[16] destination nonce
//   24 u8[32] destination proof
//   56 u64 reserved (0)
// AuthProof (48 bytes):
//    0 u32 magic 'RFAP'   4 u16 version   6 u16 reserved (0)
//    8 u8[32] source proof
//   40 u64 reserved (0)
#ifndef RAMFERRY_PROTO_AUTH_H_
#define RAMFERRY_PROTO_AUTH_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ramferry::proto {

// Hello.auth: how the connector wants to be authenticated.
inline constexpr uint16_t kAuthNone = 0;
inline constexpr uint16_t kAuthHmacSha256 = 1;

inline constexpr uint32_t kAuthChallengeMagic = 0x52464143;  // "RFAC"
inline constexpr uint32_t kAuthProofMagic = 0x52464150;      // "RFAP"
inline constexpr size_t kAuthChallengeBytes = 64;
inline constexpr size_t kAuthProofBytes = 48;
inline constexpr size_t kAuthNonceBytes = 16;
inline constexpr size_t kAuthMacBytes = 32;
// Keys shorter than this are refused: a pre-shared key is the whole secret.
inline constexpr size_t kMinAuthKeyBytes = 16;
inline constexpr size_t kMaxAuthKeyBytes = 1024;

using AuthNonce = std::array<uint8_t, kAuthNonceBytes>;
using AuthMac = std::array<uint8_t, kAuthMacBytes>;

enum class AuthSide { kSource, kDestination };

struct AuthChallenge {
  AuthNonce nonce{};
  AuthMac proof{};  // the destination's
};

struct AuthProof {
  AuthMac proof{};  // the source's
};

// OK for a usable key; otherwise says why (length).
absl::Status ValidateAuthKey(absl::string_view key);

// A fresh random nonce (getrandom).
AuthNonce NewAuthNonce();

// HMAC-SHA256(key, label(side) || hello || nonce). `hello` is the Hello as
// it went on the wire.
AuthMac ComputeAuthMac(absl::string_view key, AuthSide side,
                       absl::Span<const uint8_t> hello, const AuthNonce& nonce);

// Compares in constant time, so a forger learns nothing from timing.
bool AuthMacEquals(const AuthMac& a, const AuthMac& b);

void EncodeAuthChallenge(const AuthChallenge& c, absl::Span<uint8_t> out);
absl::StatusOr<AuthChallenge> DecodeAuthChallenge(absl::Span<const uint8_t> in);
void EncodeAuthProof(const AuthProof& p, absl::Span<uint8_t> out);
absl::StatusOr<AuthProof> DecodeAuthProof(absl::Span<const uint8_t> in);

}  // namespace ramferry::proto

#endif  // RAMFERRY_PROTO_AUTH_H_
