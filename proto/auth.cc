#include "proto/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "proto/packet.h"
#include "proto/wire.h"

namespace ramferry::proto {
namespace {

// Distinct per side, so one side's proof never verifies as the other's.
constexpr absl::string_view kSourceLabel = "ramferry auth v1 source";
constexpr absl::string_view kDestinationLabel = "ramferry auth v1 destination";

absl::Status CheckHeader(const uint8_t* p, uint32_t magic, const char* what) {
  if (uint32_t m = Load32(p); m != magic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s magic 0x%08x, want 0x%08x", what, m, magic));
  }
  if (uint16_t v = Load16(p + 4); v != kProtocolVersion) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s has protocol version %d, this end speaks %d", what,
                        v, kProtocolVersion));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateAuthKey(absl::string_view key) {
  if (key.size() < kMinAuthKeyBytes || key.size() > kMaxAuthKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("authentication key is %d bytes; it must be %d to %d "
                        "(e.g. head -c 32 /dev/urandom > key)",
                        key.size(), kMinAuthKeyBytes, kMaxAuthKeyBytes));
  }
  return absl::OkStatus();
}

AuthNonce NewAuthNonce() {
  AuthNonce nonce;
  size_t got = 0;
  while (got < nonce.size()) {
    ssize_t n = getrandom(nonce.data() + got, nonce.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return nonce;
}

AuthMac ComputeAuthMac(absl::string_view key, AuthSide side,
                       absl::Span<const uint8_t> hello,
                       const AuthNonce& nonce) {
  const absl::string_view label =
      side == AuthSide::kSource ? kSourceLabel : kDestinationLabel;
  std::vector<uint8_t> data;
  data.reserve(label.size() + 1 + hello.size() + nonce.size());
  data.insert(data.end(), label.begin(), label.end());
  data.push_back(0);  // the label ends here, whatever follows
  data.insert(data.end(), hello.begin(), hello.end());
  data.insert(data.end(), nonce.begin(), nonce.end());
  AuthMac mac{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(),
       data.size(), mac.data(), &len);
  return mac;
}

bool AuthMacEquals(const AuthMac& a, const AuthMac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void EncodeAuthChallenge(const AuthChallenge& c, absl::Span<uint8_t> out) {
  uint8_t* p = out.data();
  std::memset(p, 0, kAuthChallengeBytes);
  Store32(p, kAuthChallengeMagic);
  Store16(p + 4, kProtocolVersion);
  Store16(p + 6, kAuthHmacSha256);
  std::memcpy(p + 8, c.nonce.data(), kAuthNonceBytes);
  std::memcpy(p + 24, c.proof.data(), kAuthMacBytes);
}

absl::StatusOr<AuthChallenge> DecodeAuthChallenge(
    absl::Span<const uint8_t> in) {
  if (in.size() < kAuthChallengeBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("auth challenge truncated: %d of %d bytes", in.size(),
                        kAuthChallengeBytes));
  }
  const uint8_t* p = in.data();
  RAMFERRY_RETURN_IF_ERROR(
      CheckHeader(p, kAuthChallengeMagic, "auth challenge"));
  if (uint16_t m = Load16(p + 6); m != kAuthHmacSha256) {
    return absl::InvalidArgumentError(
        absl::StrFormat("auth challenge method %d; this end knows only "
                        "HMAC-SHA256 (%d)",
                        m, kAuthHmacSha256));
  }
  if (Load64(p + 56) != 0) {
    return absl::InvalidArgumentError(
        "auth challenge reserved field is not zero");
  }
  AuthChallenge c;
  std::memcpy(c.nonce.data(), p + 8, kAuthNonceBytes);
  std::memcpy(c.proof.data(), p + 24, kAuthMacBytes);
  return c;
}

void EncodeAuthProof(const AuthProof& a, absl::Span<uint8_t> out) {
  uint8_t* p = out.data();
  std::memset(p, 0, kAuthProofBytes);
  Store32(p, kAuthProofMagic);
  Store16(p + 4, kProtocolVersion);
  std::memcpy(p + 8, a.proof.data(), kAuthMacBytes);
}

absl::StatusOr<AuthProof> DecodeAuthProof(absl::Span<const uint8_t> in) {
  if (in.size() < kAuthProofBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "auth proof truncated: %d of %d bytes", in.size(), kAuthProofBytes));
  }
  const uint8_t* p = in.data();
  RAMFERRY_RETURN_IF_ERROR(CheckHeader(p, kAuthProofMagic, "auth proof"));
  if (Load16(p + 6) != 0 || Load64(p + 40) != 0) {
    return absl::InvalidArgumentError("auth proof reserved field is not zero");
  }
  AuthProof a;
  std::memcpy(a.proof.data(), p + 8, kAuthMacBytes);
  return a;
}

}  // namespace ramferry::proto
