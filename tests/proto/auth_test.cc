// The authentication messages and proofs: layout, round trips, every field
// a decoder must refuse, and what a proof is bound to.
#include "proto/auth.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/handshake.h"
#include "proto/wire.h"
#include "tests/proto/keyed_hello.h"
#include "tests/support/status_matchers.h"

namespace ramferry::proto {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

TEST(AuthKeyTest, LengthBounds) {
  EXPECT_OK(ValidateAuthKey(kKey));
  EXPECT_OK(ValidateAuthKey(std::string(kMinAuthKeyBytes, 'k')));
  for (size_t n : {size_t{0}, kMinAuthKeyBytes - 1, kMaxAuthKeyBytes + 1}) {
    absl::Status s = ValidateAuthKey(std::string(n, 'k'));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(s.message(), HasSubstr(std::to_string(n) + " bytes")) << n;
  }
}

TEST(AuthMacTest, KnownAnswer) {
  // Computed independently (Python hmac) over the documented input:
  // "ramferry auth v1 source" NUL || the 56-byte Hello (protocol version
  // 3) || 16 zero bytes.
  const AuthMac mac =
      ComputeAuthMac(kKey, AuthSide::kSource, HelloBytes(1, 7), AuthNonce{});
  EXPECT_EQ(absl::BytesToHexString(absl::string_view(
                reinterpret_cast<const char*>(mac.data()), mac.size())),
            "70041ca82f04fcda9a23ec279156841c4bc60f8ceee0bf68a08427c1825f1288");
}

TEST(AuthMacTest, BoundToKeySideHelloAndNonce) {
  const std::vector<uint8_t> hello = HelloBytes(1, 7);
  AuthNonce nonce = NewAuthNonce();
  const AuthMac base = ComputeAuthMac(kKey, AuthSide::kSource, hello, nonce);

  std::string other_key = kKey;
  other_key[0] ^= 1;
  EXPECT_FALSE(AuthMacEquals(
      base, ComputeAuthMac(other_key, AuthSide::kSource, hello, nonce)));
  // A destination's proof is not a source's (no reflection).
  EXPECT_FALSE(AuthMacEquals(
      base, ComputeAuthMac(kKey, AuthSide::kDestination, hello, nonce)));
  // Another channel index, another session.
  EXPECT_FALSE(AuthMacEquals(
      base, ComputeAuthMac(kKey, AuthSide::kSource, HelloBytes(2, 7), nonce)));
  EXPECT_FALSE(AuthMacEquals(
      base, ComputeAuthMac(kKey, AuthSide::kSource, HelloBytes(1, 8), nonce)));
  // A fresh nonce (a replayed proof does not verify).
  AuthNonce fresh = nonce;
  fresh[15] ^= 1;
  EXPECT_FALSE(AuthMacEquals(
      base, ComputeAuthMac(kKey, AuthSide::kSource, hello, fresh)));
}

TEST(AuthMacTest, NoncesAreFresh) { EXPECT_NE(NewAuthNonce(), NewAuthNonce()); }

TEST(AuthChallengeTest, RoundTripAndLayout) {
  AuthChallenge c;
  for (size_t i = 0; i < c.nonce.size(); ++i) c.nonce[i] = uint8_t(i + 1);
  for (size_t i = 0; i < c.proof.size(); ++i) c.proof[i] = uint8_t(0x80 + i);
  std::vector<uint8_t> buf(kAuthChallengeBytes, 0xAB);
  EncodeAuthChallenge(c, absl::MakeSpan(buf));
  EXPECT_EQ(Load32(buf.data()), kAuthChallengeMagic);
  EXPECT_EQ(Load16(buf.data() + 6), kAuthHmacSha256);
  EXPECT_EQ(buf[8], 1);
  EXPECT_EQ(buf[24], 0x80);
  absl::StatusOr<AuthChallenge> back = DecodeAuthChallenge(buf);
  ASSERT_OK(back);
  EXPECT_EQ(back->nonce, c.nonce);
  EXPECT_EQ(back->proof, c.proof);
}

// A byte whose corruption a decoder must refuse, a word of its reason, and
// its code (a version this end does not speak is a precondition, not bad
// input).
struct BadByte {
  size_t byte;
  const char* says;
  absl::StatusCode code = absl::StatusCode::kInvalidArgument;
};

// Each case: `good` with that byte's bits `flip` flipped is refused with a
// message naming the field.
template <typename Decode>
void ExpectEachRefused(const std::vector<uint8_t>& good, uint8_t flip,
                       std::initializer_list<BadByte> cases, Decode decode) {
  for (const BadByte& c : cases) {
    std::vector<uint8_t> bad = good;
    bad[c.byte] ^= flip;
    EXPECT_THAT(decode(bad), StatusIs(c.code, HasSubstr(c.says))) << c.byte;
  }
}

TEST(AuthChallengeTest, RefusesBadFields) {
  std::vector<uint8_t> good(kAuthChallengeBytes);
  EncodeAuthChallenge(AuthChallenge{}, absl::MakeSpan(good));
  EXPECT_THAT(DecodeAuthChallenge(absl::MakeSpan(good).subspan(0, 63))
                  .status()
                  .message(),
              HasSubstr("truncated"));
  ExpectEachRefused(
      good, 0x40,
      {{0, "magic"},
       {5, "version", absl::StatusCode::kFailedPrecondition},
       {7, "method"},
       {63, "reserved"}},
      [](absl::Span<const uint8_t> in) { return DecodeAuthChallenge(in); });
}

TEST(AuthProofTest, RoundTripAndBadFields) {
  AuthProof p;
  p.proof.fill(0x5A);
  std::vector<uint8_t> buf(kAuthProofBytes);
  EncodeAuthProof(p, absl::MakeSpan(buf));
  absl::StatusOr<AuthProof> back = DecodeAuthProof(buf);
  ASSERT_OK(back);
  EXPECT_EQ(back->proof, p.proof);
  EXPECT_THAT(
      DecodeAuthProof(absl::MakeSpan(buf).subspan(1)).status().message(),
      HasSubstr("truncated"));
  ExpectEachRefused(
      buf, 0x10,
      {{1, "magic"},
       {4, "version", absl::StatusCode::kFailedPrecondition},
       {6, "reserved"},
       {47, "reserved"}},
      [](absl::Span<const uint8_t> in) { return DecodeAuthProof(in); });
}

}  // namespace
}  // namespace ramferry::proto
