// Stream sealing: the key schedule's separations, AES-256-GCM against a
// published vector, and every way a sealed message must fail to open.
#include "proto/seal.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "proto/handshake.h"
#include "tests/proto/keyed_hello.h"
#include "tests/support/status_matchers.h"

namespace ramferry::proto {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

AuthNonce Nonce(uint8_t b) {
  AuthNonce n;
  n.fill(b);
  return n;
}

// A HelloReply as it goes on the wire, granting `capabilities`.
std::vector<uint8_t> ReplyBytes(uint64_t capabilities) {
  HelloReply r;
  r.capabilities = capabilities;
  std::vector<uint8_t> out(kHelloReplyBytes);
  EncodeHelloReply(r, absl::MakeSpan(out));
  return out;
}

SealKeys Derive(const std::string& key, uint32_t channel, uint8_t session,
                uint8_t nonce, uint64_t granted = kFeatureZeroPages) {
  absl::StatusOr<SealKeys> k = DeriveSealKeys(
      key, HelloBytes(channel, session), ReplyBytes(granted), Nonce(nonce));
  EXPECT_OK(k);
  return k.ok() ? *k : SealKeys{};
}

bool SameKey(const SealKey& a, const SealKey& b) {
  return a.key == b.key && a.salt == b.salt;
}

TEST(SealKeysTest, DistinctPerDirectionChannelSessionNonceAndKey) {
  const SealKeys base = Derive(kKey, 1, 7, 3);
  EXPECT_FALSE(SameKey(base.to_destination, base.to_source));
  EXPECT_TRUE(
      SameKey(base.to_destination, Derive(kKey, 1, 7, 3).to_destination));
  EXPECT_FALSE(
      SameKey(base.to_destination, Derive(kKey, 2, 7, 3).to_destination));
  EXPECT_FALSE(
      SameKey(base.to_destination, Derive(kKey, 1, 8, 3).to_destination));
  EXPECT_FALSE(
      SameKey(base.to_destination, Derive(kKey, 1, 7, 4).to_destination));
  EXPECT_FALSE(
      SameKey(base.to_destination, Derive(kKey + "x", 1, 7, 3).to_destination));
  // Review A4: the reply is bound too; one granted bit more or less, and
  // the keys differ.
  EXPECT_FALSE(SameKey(base.to_destination,
                       Derive(kKey, 1, 7, 3, /*granted=*/0).to_destination));
  EXPECT_FALSE(
      SameKey(base.to_source, Derive(kKey, 1, 7, 3, /*granted=*/0).to_source));
}

TEST(SealKeysTest, RefusesAShortKey) {
  EXPECT_THAT(
      DeriveSealKeys("short", HelloBytes(0, 1), ReplyBytes(0), Nonce(1)),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "it must be 16 to 1024 (e.g. head -c 32 /dev/urandom > key)")));
}

// NIST GCM test vector (AES-256, 96-bit IV, 60-byte plaintext, 20 bytes of
// associated data; "Test Case 16" of the GCM specification), with the IV
// split as salt (4 bytes) + sequence (8 bytes, big-endian).
TEST(SealerTest, MatchesThePublishedGcmVector) {
  SealKey key;
  const std::string k = absl::HexStringToBytes(
      "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308");
  std::copy(k.begin(), k.end(), key.key.begin());
  const std::string iv = absl::HexStringToBytes("cafebabefacedbaddecaf888");
  std::copy(iv.begin(), iv.begin() + 4, key.salt.begin());
  uint64_t seq = 0;
  for (int i = 4; i < 12; ++i) seq = seq << 8 | static_cast<uint8_t>(iv[i]);
  const std::string plain = absl::HexStringToBytes(
      "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
      "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39");
  const std::string aad =
      absl::HexStringToBytes("feedfacedeadbeeffeedfacedeadbeefabaddad2");
  const std::string cipher = absl::HexStringToBytes(
      "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
      "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662");
  const std::string tag =
      absl::HexStringToBytes("76fc6ece0f4e1768cddf8853bb2d551b");

  auto s = Sealer::Create(SealMode::kEncrypt, key, Sealer::Use::kSeal);
  ASSERT_OK(s);
  std::vector<uint8_t> buf(plain.begin(), plain.end());
  (*s)->Begin(seq);
  (*s)->Associate({reinterpret_cast<const uint8_t*>(aad.data()), aad.size()});
  (*s)->SealBody(buf.data(), buf.data(), 30);  // in two pieces
  (*s)->SealBody(buf.data() + 30, buf.data() + 30, buf.size() - 30);
  absl::StatusOr<SealTag> t = (*s)->FinishSeal();
  ASSERT_OK(t);
  EXPECT_EQ(std::string(buf.begin(), buf.end()), cipher);
  EXPECT_EQ(std::string(t->begin(), t->end()), tag);

  auto o = Sealer::Create(SealMode::kEncrypt, key, Sealer::Use::kOpen);
  ASSERT_OK(o);
  (*o)->Begin(seq);
  (*o)->Associate({reinterpret_cast<const uint8_t*>(aad.data()), aad.size()});
  (*o)->OpenBody(buf.data(), buf.size());
  EXPECT_TRUE((*o)->FinishOpen(*t));
  EXPECT_EQ(std::string(buf.begin(), buf.end()), plain);
}

// A message: header (associated) + body, sealed under one key.
struct Sealed {
  std::vector<uint8_t> header, body;
  SealTag tag;
};

class SealModeTest : public ::testing::TestWithParam<SealMode> {
 protected:
  void SetUp() override {
    keys_ = Derive(kKey, 0, 1, 2);
    seal_ =
        *Sealer::Create(GetParam(), keys_.to_destination, Sealer::Use::kSeal);
    open_ =
        *Sealer::Create(GetParam(), keys_.to_destination, Sealer::Use::kOpen);
  }
  Sealed Seal(uint64_t seq, uint8_t fill) {
    Sealed m;
    m.header.assign(64, fill);
    std::vector<uint8_t> plain(10000);
    for (size_t i = 0; i < plain.size(); ++i) plain[i] = fill + i * 7;
    m.body.resize(plain.size());
    seal_->Begin(seq);
    seal_->Associate(m.header);
    seal_->SealBody(plain.data(), m.body.data(), plain.size());
    m.tag = *seal_->FinishSeal();
    if (GetParam() == SealMode::kMac) {
      EXPECT_EQ(m.body, plain);
    } else {
      EXPECT_NE(m.body, plain);
    }
    return m;
  }
  bool Open(Sealed m, uint64_t seq, Sealer* opener = nullptr) {
    Sealer* o = opener != nullptr ? opener : open_.get();
    o->Begin(seq);
    o->Associate(m.header);
    o->OpenBody(m.body.data(), m.body.size());
    return o->FinishOpen(m.tag);
  }
  SealKeys keys_;
  std::unique_ptr<Sealer> seal_, open_;
};

TEST_P(SealModeTest, OpensWhatWasSealedAndRecoversThePlaintext) {
  Sealed m = Seal(5, 3);
  open_->Begin(5);
  open_->Associate(m.header);
  open_->OpenBody(m.body.data(), m.body.size());
  ASSERT_TRUE(open_->FinishOpen(m.tag));
  for (size_t i = 0; i < m.body.size(); ++i) {
    ASSERT_EQ(m.body[i], static_cast<uint8_t>(3 + i * 7)) << i;
  }
}

TEST_P(SealModeTest, EveryAlterationFailsToOpen) {
  const Sealed m = Seal(9, 1);
  EXPECT_TRUE(Open(m, 9));
  EXPECT_FALSE(Open(m, 8)) << "replayed / reordered: wrong sequence";
  EXPECT_FALSE(Open(m, 10)) << "one dropped before it";
  Sealed h = m;
  h.header[17] ^= 0x10;
  EXPECT_FALSE(Open(h, 9)) << "header bit";
  Sealed b = m;
  b.body[4321] ^= 0x01;
  EXPECT_FALSE(Open(b, 9)) << "body bit";
  Sealed t = m;
  t.tag[15] ^= 0x80;
  EXPECT_FALSE(Open(t, 9)) << "tag bit";
  Sealed cut = m;
  cut.body.resize(cut.body.size() - 1);
  EXPECT_FALSE(Open(cut, 9)) << "truncated";
  // Another channel's, or the other direction's, key.
  auto other = *Sealer::Create(GetParam(), Derive(kKey, 1, 1, 2).to_destination,
                               Sealer::Use::kOpen);
  EXPECT_FALSE(Open(m, 9, other.get())) << "spliced from another channel";
  auto back = *Sealer::Create(GetParam(), keys_.to_source, Sealer::Use::kOpen);
  EXPECT_FALSE(Open(m, 9, back.get())) << "reflected";
  // And the opener is still good for the next honest message.
  EXPECT_TRUE(Open(Seal(10, 2), 10));
}

TEST_P(SealModeTest, ModesDoNotOpenEachOther) {
  const SealMode other =
      GetParam() == SealMode::kMac ? SealMode::kEncrypt : SealMode::kMac;
  auto o = *Sealer::Create(other, keys_.to_destination, Sealer::Use::kOpen);
  EXPECT_FALSE(Open(Seal(1, 4), 1, o.get()));
}

INSTANTIATE_TEST_SUITE_P(Modes, SealModeTest,
                         ::testing::Values(SealMode::kMac, SealMode::kEncrypt),
                         [](const auto& info) {
                           return std::string(SealModeName(info.param));
                         });

TEST(SealerTest, NoneIsNotAMode) {
  EXPECT_THAT(Sealer::Create(SealMode::kNone, SealKey{}, Sealer::Use::kSeal),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a Sealer needs mode mac or encrypt")));
}

}  // namespace
}  // namespace ramferry::proto
