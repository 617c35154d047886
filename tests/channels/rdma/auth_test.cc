// The rdma key exchange without a device: what the accept's private data
// carries, and each side's checks (channels/rdma/auth.h).
#include "channels/rdma/auth.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/auth.h"
#include "proto/handshake.h"
#include "tests/support/status_matchers.h"

namespace ramferry::channels {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;

const std::string kKey = "correct horse battery staple 42!";
const std::string kOtherKey = "correct horse battery staple 43!";

std::vector<uint8_t> HelloBytes(uint32_t channel) {
  proto::Hello h;
  h.role = proto::Role::kData;
  h.session.bytes[0] = 7;
  h.channel_index = channel;
  h.channel_count = 4;
  h.max_packet_pages = 64;
  h.auth = proto::kAuthHmacSha256;
  h.rdma_chunk_bytes = 1 << 20;
  std::vector<uint8_t> out(proto::kHelloBytes);
  proto::EncodeHello(h, absl::MakeSpan(out));
  return out;
}

proto::HelloReply Accepted() {
  proto::HelloReply r;
  r.capabilities = proto::kFeatureRdmaPinAll | proto::kFeatureRdmaCredits;
  return r;
}

// An IB CM REP hands the source its whole fixed-size private data.
std::vector<uint8_t> AsDelivered(std::vector<uint8_t> bytes) {
  bytes.resize(kRdmaAcceptPrivateDataMax, 0);
  return bytes;
}

TEST(RdmaAuthTest, KeyedAcceptFitsOneRepAndRoundTrips) {
  const std::vector<uint8_t> hello = HelloBytes(1);
  RdmaSourceChallenge c = ChallengeSource(kKey, hello);
  const std::vector<uint8_t> bytes =
      EncodeRdmaAccept({Accepted(), c.challenge});
  EXPECT_EQ(bytes.size(), kRdmaKeyedAcceptBytes);
  EXPECT_LE(bytes.size(), kRdmaAcceptPrivateDataMax);
  absl::StatusOr<RdmaAccept> got = DecodeRdmaAccept(AsDelivered(bytes));
  ASSERT_OK(got);
  EXPECT_TRUE(got->reply.accepted());
  EXPECT_EQ(got->reply.capabilities, Accepted().capabilities);
  ASSERT_TRUE(got->challenge.has_value());
  EXPECT_EQ(got->challenge->nonce, c.challenge.nonce);
  EXPECT_EQ(got->challenge->proof, c.challenge.proof);
}

TEST(RdmaAuthTest, KeylessAcceptCarriesNoChallengeEvenPadded) {
  const std::vector<uint8_t> bytes = EncodeRdmaAccept({Accepted(), {}});
  EXPECT_EQ(bytes.size(), proto::kHelloReplyBytes);
  for (const std::vector<uint8_t>& in : {bytes, AsDelivered(bytes)}) {
    absl::StatusOr<RdmaAccept> got = DecodeRdmaAccept(in);
    ASSERT_OK(got);
    EXPECT_FALSE(got->challenge.has_value());
  }
}

TEST(RdmaAuthTest, GarbageAfterTheReplyOrABrokenChallengeIsRefused) {
  std::vector<uint8_t> bytes = AsDelivered(EncodeRdmaAccept({Accepted(), {}}));
  bytes[proto::kHelloReplyBytes + 9] = 1;
  EXPECT_THAT(std::string(DecodeRdmaAccept(bytes).status().message()),
              HasSubstr("not an auth challenge"));
  const std::vector<uint8_t> hello = HelloBytes(0);
  std::vector<uint8_t> keyed = AsDelivered(
      EncodeRdmaAccept({Accepted(), ChallengeSource(kKey, hello).challenge}));
  keyed[proto::kHelloReplyBytes + 60] = 1;  // the challenge's reserved field
  EXPECT_THAT(DecodeRdmaAccept(keyed),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("auth challenge reserved field is not zero")));
  // Truncated in the reply: no accept at all.
  EXPECT_THAT(DecodeRdmaAccept(absl::MakeConstSpan(keyed).subspan(0, 100)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hello reply truncated")));
}

TEST(RdmaAuthTest, HonestEndsProveTheKeyToEachOther) {
  const std::vector<uint8_t> hello = HelloBytes(2);
  RdmaSourceChallenge c = ChallengeSource(kKey, hello);
  const RdmaAccept accept{Accepted(), c.challenge};
  ASSERT_OK(CheckDestination(kKey, hello, accept));
  const auto proof = SourceProof(kKey, hello, *accept.challenge);
  EXPECT_OK(CheckSourceProof(proof, c.expected));
  // A fresh nonce per connection: the same Hello is challenged anew.
  EXPECT_NE(ChallengeSource(kKey, hello).challenge.nonce, c.challenge.nonce);
}

TEST(RdmaAuthTest, TheSourceRefusesADestinationThatCannotProveTheKey) {
  const std::vector<uint8_t> hello = HelloBytes(0);
  // Another key.
  absl::Status s = CheckDestination(
      kKey, hello, {Accepted(), ChallengeSource(kOtherKey, hello).challenge});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("failed to prove it holds the key"));
  // A proof over another Hello (another channel's, replayed).
  s = CheckDestination(
      kKey, hello,
      {Accepted(), ChallengeSource(kKey, HelloBytes(3)).challenge});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  // No challenge at all: fail closed.
  s = CheckDestination(kKey, hello, {Accepted(), {}});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(s.message()), HasSubstr("without proving"));
  // A keyless source meets a challenge: it is told to get the key.
  s = CheckDestination("", hello,
                       {Accepted(), ChallengeSource(kKey, hello).challenge});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(s.message()), HasSubstr("destination's key"));
  EXPECT_OK(CheckDestination("", hello, {Accepted(), {}}));
}

TEST(RdmaAuthTest, TheDestinationRefusesAnyFirstMessageButTheProof) {
  const std::vector<uint8_t> hello = HelloBytes(1);
  RdmaSourceChallenge c = ChallengeSource(kKey, hello);
  const auto wrong_key = SourceProof(kOtherKey, hello, c.challenge);
  absl::Status s = CheckSourceProof(wrong_key, c.expected);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(s.message()), HasSubstr("authentication failed"));
  // The destination's own proof reflected back.
  proto::AuthProof reflected{c.challenge.proof};
  std::vector<uint8_t> bytes(proto::kAuthProofBytes);
  proto::EncodeAuthProof(reflected, absl::MakeSpan(bytes));
  EXPECT_EQ(CheckSourceProof(bytes, c.expected).code(),
            absl::StatusCode::kUnauthenticated);
  // Not a proof: e.g. a REGISTER_REQUEST sent first, or the right proof
  // with bytes after it.
  std::vector<uint8_t> other(proto::kAuthProofBytes, 0xab);
  s = CheckSourceProof(other, c.expected);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a proof"));
  const auto right = SourceProof(kKey, hello, c.challenge);
  std::vector<uint8_t> longer(right.begin(), right.end());
  longer.push_back(0);
  EXPECT_EQ(CheckSourceProof(longer, c.expected).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckSourceProof({}, c.expected).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(RdmaAuthTest, AHelloMustAskForWhatTheDestinationRequires) {
  EXPECT_OK(CheckHelloAuth(true, proto::kAuthHmacSha256));
  EXPECT_OK(CheckHelloAuth(false, proto::kAuthNone));
  absl::Status s = CheckHelloAuth(true, proto::kAuthNone);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(s.message()), HasSubstr("requires authentication"));
  s = CheckHelloAuth(false, proto::kAuthHmacSha256);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(s.message()), HasSubstr("has no key"));
}

}  // namespace
}  // namespace ramferry::channels
