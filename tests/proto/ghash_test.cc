// The fast GHASH (proto/ghash.h) gives AES-GCM's tag to the bit: checked
// against OpenSSL's GCM over associated data only, for every length from 0
// to past two 16-block strides, fed in random pieces, and on long messages;
// and a Sealer on it interoperates with one on OpenSSL's path.
#include "proto/ghash.h"

#include <openssl/evp.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "proto/seal.h"

namespace ramferry::proto {
namespace {

#define SKIP_WITHOUT_FAST_GHASH()                                         \
  do {                                                                    \
    if (!Ghash::Available()) {                                            \
      GTEST_SKIP() << "this CPU lacks AVX-512 or VPCLMULQDQ: the Sealer " \
                      "keeps OpenSSL's GCM";                              \
    }                                                                     \
  } while (0)

using Block = std::array<uint8_t, 16>;

// OpenSSL's AES-256-GCM tag over `aad` (no plaintext) under key, nonce.
Block OpenSslTag(const std::array<uint8_t, 32>& key,
                 const std::array<uint8_t, 12>& nonce,
                 const std::vector<uint8_t>& aad) {
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  EXPECT_EQ(EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), nullptr, key.data(),
                               nonce.data()),
            1);
  int len = 0;
  if (!aad.empty()) {
    EXPECT_EQ(EVP_EncryptUpdate(c, nullptr, &len, aad.data(),
                                static_cast<int>(aad.size())),
              1);
  }
  uint8_t none[16];
  EXPECT_EQ(EVP_EncryptFinal_ex(c, none, &len), 1);
  Block tag{};
  EXPECT_EQ(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, tag.data()), 1);
  EVP_CIPHER_CTX_free(c);
  return tag;
}

Block AesBlock(const std::array<uint8_t, 32>& key, const Block& in) {
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  EXPECT_EQ(
      EVP_EncryptInit_ex(c, EVP_aes_256_ecb(), nullptr, key.data(), nullptr),
      1);
  EVP_CIPHER_CTX_set_padding(c, 0);
  Block out{};
  int len = 0;
  EXPECT_EQ(EVP_EncryptUpdate(c, out.data(), &len, in.data(), 16), 1);
  EVP_CIPHER_CTX_free(c);
  return out;
}

// The tag through Ghash, `aad` fed in random pieces.
Block FastTag(const std::array<uint8_t, 32>& key,
              const std::array<uint8_t, 12>& nonce,
              const std::vector<uint8_t>& aad, std::mt19937_64& rng) {
  Ghash g(AesBlock(key, Block{}));
  g.Reset();
  for (size_t at = 0; at < aad.size();) {
    const size_t n = std::min<size_t>(aad.size() - at, rng() % 700);
    g.Update(aad.data() + at, n);
    at += n;
  }
  Block j0{};
  std::copy(nonce.begin(), nonce.end(), j0.begin());
  j0[15] = 1;
  return g.Finish(AesBlock(key, j0));
}

TEST(GhashTest, EveryLengthGivesOpenSslsTag) {
  SKIP_WITHOUT_FAST_GHASH();
  std::mt19937_64 rng(7);
  for (size_t n = 0; n <= 600; ++n) {
    std::array<uint8_t, 32> key;
    std::array<uint8_t, 12> nonce;
    for (auto& b : key) b = static_cast<uint8_t>(rng());
    for (auto& b : nonce) b = static_cast<uint8_t>(rng());
    std::vector<uint8_t> aad(n);
    for (auto& b : aad) b = static_cast<uint8_t>(rng());
    ASSERT_EQ(FastTag(key, nonce, aad, rng), OpenSslTag(key, nonce, aad))
        << n << " bytes";
  }
}

TEST(GhashTest, LongMessagesGiveOpenSslsTag) {
  SKIP_WITHOUT_FAST_GHASH();
  std::mt19937_64 rng(8);
  for (size_t n : {size_t{4096}, size_t{512 << 10} + 1088, size_t{3} << 20}) {
    std::array<uint8_t, 32> key;
    std::array<uint8_t, 12> nonce{};
    for (auto& b : key) b = static_cast<uint8_t>(rng());
    std::vector<uint8_t> aad(n);
    for (auto& b : aad) b = static_cast<uint8_t>(rng());
    ASSERT_EQ(FastTag(key, nonce, aad, rng), OpenSslTag(key, nonce, aad))
        << n << " bytes";
  }
}

// A source sealing with the fast path, a destination opening with
// OpenSSL's (as a peer without the instructions does), and the other way:
// the same tags, and a flipped bit still fails.
TEST(GhashTest, ASealerOnItInteroperatesWithOpenSsl) {
  SKIP_WITHOUT_FAST_GHASH();
  SealKey key;
  key.key.fill(0x42);
  key.salt = {1, 2, 3, 4};
  std::vector<uint8_t> header(1088, 0x17), body(512 << 10);
  std::mt19937_64 rng(9);
  for (auto& b : body) b = static_cast<uint8_t>(rng());
  constexpr uint64_t kSequence = 77;
  auto fast = *Sealer::Create(SealMode::kMac, key, Sealer::Use::kSeal);
  fast->Begin(kSequence);
  fast->Associate(header);
  fast->SealBody(body.data(), body.data(), body.size());
  const SealTag tag = *fast->FinishSeal();

  std::array<uint8_t, 12> nonce{};
  std::copy(key.salt.begin(), key.salt.end(), nonce.begin());
  for (int i = 0; i < 8; ++i)
    nonce[11 - i] = static_cast<uint8_t>(kSequence >> (8 * i));
  std::vector<uint8_t> all = header;
  all.insert(all.end(), body.begin(), body.end());
  EXPECT_EQ(tag, OpenSslTag(key.key, nonce, all));

  auto open = *Sealer::Create(SealMode::kMac, key, Sealer::Use::kOpen);
  open->Begin(kSequence);
  open->Associate(header);
  open->OpenBody(body.data(), body.size());
  EXPECT_TRUE(open->FinishOpen(tag));
  body[1000] ^= 1;
  open->Begin(kSequence);
  open->Associate(header);
  open->OpenBody(body.data(), body.size());
  EXPECT_FALSE(open->FinishOpen(tag));
}

}  // namespace
}  // namespace ramferry::proto
