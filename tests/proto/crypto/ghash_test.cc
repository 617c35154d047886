// The fast GHASH (proto/crypto/ghash.h) gives AES-GCM's tag to the bit: checked
// against OpenSSL's GCM over associated data only, for every length from 0
// to past two 16-block strides, fed in random pieces, and on long messages;
// and a Sealer on it interoperates with one on OpenSSL's path. The VAES
// counter mode (proto/crypto/aes_ctr.h) is AES block by block, across the
// counter's wrap; with both, an encrypting Sealer gives OpenSSL's
// ciphertext and tag.
#include "proto/crypto/ghash.h"

#include <openssl/evp.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "proto/crypto/aes_ctr.h"
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

#define SKIP_WITHOUT_FAST_GCM()                                          \
  do {                                                                   \
    if (!Ghash::Available() || !AesCtr::Available()) {                   \
      GTEST_SKIP() << "this CPU lacks AVX-512, VAES or VPCLMULQDQ: the " \
                      "Sealer keeps OpenSSL's GCM";                      \
    }                                                                    \
  } while (0)

template <size_t N>
std::array<uint8_t, N> RandomBytes(std::mt19937_64& rng) {
  std::array<uint8_t, N> a;
  for (auto& b : a) b = static_cast<uint8_t>(rng());
  return a;
}

TEST(AesCtrTest, OneBlockIsOpenSslsAes) {
  SKIP_WITHOUT_FAST_GCM();
  std::mt19937_64 rng(10);
  for (int i = 0; i < 50; ++i) {
    const auto key = RandomBytes<32>(rng);
    const Block in = RandomBytes<16>(rng);
    ASSERT_EQ(AesCtr(key).EncryptBlock(in), AesBlock(key, in)) << i;
  }
}

// The keystream is AES of each counter block in turn, only the last four
// bytes counting (and wrapping without a carry), whatever the pieces it is
// applied in, in place or not.
TEST(AesCtrTest, KeystreamIsEachCounterBlockAcrossTheWrap) {
  SKIP_WITHOUT_FAST_GCM();
  std::mt19937_64 rng(11);
  const auto key = RandomBytes<32>(rng);
  Block start = RandomBytes<16>(rng);
  start[12] = start[13] = start[14] = 0xff;  // wraps after a few blocks
  start[15] = 0xf5;
  std::vector<uint8_t> in(64 * 1024 + 333);
  for (auto& b : in) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> want(in.size());
  Block counter = start;
  for (size_t at = 0; at < in.size(); at += 16) {
    const Block ks = AesBlock(key, counter);
    for (size_t i = 0; i < 16 && at + i < in.size(); ++i) {
      want[at + i] = in[at + i] ^ ks[i];
    }
    for (int i = 15; i >= 12 && ++counter[i] == 0; --i) {
    }
  }
  AesCtr aes(key);
  for (bool in_place : {false, true}) {
    std::vector<uint8_t> out = in;
    aes.Start(start);
    for (size_t at = 0; at < in.size();) {
      const size_t n = std::min<size_t>(in.size() - at, rng() % 1200);
      aes.Apply((in_place ? out.data() : in.data()) + at, out.data() + at, n);
      at += n;
    }
    EXPECT_EQ(out, want) << (in_place ? "in place" : "out of place");
  }
}

// OpenSSL's AES-256-GCM over `aad` and `body`: the ciphertext and the tag.
std::pair<std::vector<uint8_t>, Block> OpenSslSeal(
    const SealKey& key, uint64_t sequence, const std::vector<uint8_t>& aad,
    const std::vector<uint8_t>& body) {
  std::array<uint8_t, 12> nonce{};
  std::copy(key.salt.begin(), key.salt.end(), nonce.begin());
  for (int i = 0; i < 8; ++i)
    nonce[11 - i] = static_cast<uint8_t>(sequence >> (8 * i));
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  EXPECT_EQ(EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), nullptr, key.key.data(),
                               nonce.data()),
            1);
  int len = 0;
  if (!aad.empty()) {
    EXPECT_EQ(EVP_EncryptUpdate(c, nullptr, &len, aad.data(),
                                static_cast<int>(aad.size())),
              1);
  }
  std::vector<uint8_t> out(body.size());
  if (!body.empty()) {
    EXPECT_EQ(EVP_EncryptUpdate(c, out.data(), &len, body.data(),
                                static_cast<int>(body.size())),
              1);
  }
  uint8_t none[16];
  EXPECT_EQ(EVP_EncryptFinal_ex(c, none, &len), 1);
  Block tag{};
  EXPECT_EQ(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, tag.data()), 1);
  EVP_CIPHER_CTX_free(c);
  return {out, tag};
}

// Sealing in random pieces gives OpenSSL's ciphertext and tag; opening in
// other pieces gives the body back and accepts the tag, and a flipped bit
// of header, body or tag fails.
TEST(AesCtrTest, AnEncryptingSealerIsOpenSslsGcm) {
  SKIP_WITHOUT_FAST_GCM();
  std::mt19937_64 rng(12);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (size_t n :
       {size_t{4096}, size_t{(64 << 10) + 13}, size_t{(1 << 20) + 1088}})
    lengths.push_back(n);
  for (size_t n : lengths) {
    SealKey key;
    key.key = RandomBytes<32>(rng);
    key.salt = RandomBytes<4>(rng);
    const uint64_t sequence = rng();
    std::vector<uint8_t> header(rng() % 100), body(n);
    for (auto& b : header) b = static_cast<uint8_t>(rng());
    for (auto& b : body) b = static_cast<uint8_t>(rng());
    const auto [want, want_tag] = OpenSslSeal(key, sequence, header, body);

    auto seal = *Sealer::Create(SealMode::kEncrypt, key, Sealer::Use::kSeal);
    seal->Begin(sequence);
    seal->Associate(header);
    std::vector<uint8_t> wire(n);
    for (size_t at = 0; at < n;) {
      const size_t piece = std::min<size_t>(n - at, rng() % 5000);
      seal->SealBody(body.data() + at, wire.data() + at, piece);
      at += piece;
    }
    const SealTag tag = *seal->FinishSeal();
    ASSERT_EQ(wire, want) << n << " bytes";
    ASSERT_EQ(tag, want_tag) << n << " bytes";

    auto open = *Sealer::Create(SealMode::kEncrypt, key, Sealer::Use::kOpen);
    const auto opens = [&](std::vector<uint8_t> h, std::vector<uint8_t> data,
                           SealTag t) {
      open->Begin(sequence);
      open->Associate(h);
      for (size_t at = 0; at < data.size();) {
        const size_t piece = std::min<size_t>(data.size() - at, rng() % 5000);
        open->OpenBody(data.data() + at, piece);
        at += piece;
      }
      return std::make_pair(open->FinishOpen(t), data);
    };
    const auto [ok, plain] = opens(header, wire, tag);
    ASSERT_TRUE(ok) << n << " bytes";
    ASSERT_EQ(plain, body) << n << " bytes";
    if (n > 0) {
      std::vector<uint8_t> bad = wire;
      bad[rng() % n] ^= 4;
      EXPECT_FALSE(opens(header, bad, tag).first) << n << " bytes";
    }
    if (!header.empty()) {
      std::vector<uint8_t> bad = header;
      bad[rng() % bad.size()] ^= 4;
      EXPECT_FALSE(opens(bad, wire, tag).first) << n << " bytes";
    }
    SealTag bad_tag = tag;
    bad_tag[rng() % 16] ^= 1;
    EXPECT_FALSE(opens(header, wire, bad_tag).first) << n << " bytes";
  }
}

}  // namespace
}  // namespace ramferry::proto
