#include "proto/seal.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "base/status_macros.h"
#include "proto/crypto/aes_ctr.h"
#include "proto/handshake.h"
#include "proto/wire.h"

namespace ramferry::proto {
namespace {

constexpr absl::string_view kSealLabel = "ramferry seal v1";

EVP_CIPHER_CTX* Ctx(void* p) { return static_cast<EVP_CIPHER_CTX*>(p); }

// OpenSSL's lengths are ints: bodies go through in pieces this big. Small
// enough too that a copied piece is still in cache when GHASH reads it.
constexpr size_t kPieceBytes = 64 << 10;

}  // namespace

const char* SealModeName(SealMode mode) {
  switch (mode) {
    case SealMode::kNone:
      return "none";
    case SealMode::kMac:
      return "mac";
    case SealMode::kEncrypt:
      return "encrypt";
  }
  return "?";
}

uint64_t SealFeature(SealMode mode) {
  switch (mode) {
    case SealMode::kNone:
      return 0;
    case SealMode::kMac:
      return kFeatureSealMac;
    case SealMode::kEncrypt:
      return kFeatureSealEncrypt;
  }
  return 0;
}

absl::StatusOr<SealMode> SealModeOf(uint64_t capabilities) {
  const bool mac = (capabilities & kFeatureSealMac) != 0;
  const bool encrypt = (capabilities & kFeatureSealEncrypt) != 0;
  if (mac && encrypt) {
    return absl::InvalidArgumentError(
        "hello asks for both mac and encrypt protection");
  }
  return encrypt ? SealMode::kEncrypt : mac ? SealMode::kMac : SealMode::kNone;
}

absl::StatusOr<SealKeys> DeriveSealKeys(absl::string_view psk,
                                        absl::Span<const uint8_t> hello,
                                        absl::Span<const uint8_t> reply,
                                        const AuthNonce& nonce) {
  RAMFERRY_RETURN_IF_ERROR(ValidateAuthKey(psk));
  std::string info(kSealLabel);
  info.append(reinterpret_cast<const char*>(hello.data()), hello.size());
  info.append(reinterpret_cast<const char*>(reply.data()), reply.size());
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, OSSL_KDF_NAME_HKDF, nullptr);
  EVP_KDF_CTX* ctx = kdf == nullptr ? nullptr : EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (ctx == nullptr) {
    return absl::InternalError("OpenSSL has no HKDF (libcrypto too old?)");
  }
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(
          OSSL_KDF_PARAM_KEY, const_cast<char*>(psk.data()), psk.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT,
                                        const_cast<uint8_t*>(nonce.data()),
                                        nonce.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info.data(),
                                        info.size()),
      OSSL_PARAM_construct_end(),
  };
  uint8_t out[2 * (kSealKeyBytes + kSealSaltBytes)];
  const int ok = EVP_KDF_derive(ctx, out, sizeof out, params);
  EVP_KDF_CTX_free(ctx);
  if (ok != 1) return absl::InternalError("HKDF-SHA256 derivation failed");
  SealKeys keys;
  const uint8_t* p = out;
  for (SealKey* k : {&keys.to_destination, &keys.to_source}) {
    std::memcpy(k->key.data(), p, kSealKeyBytes);
    p += kSealKeyBytes;
    std::memcpy(k->salt.data(), p, kSealSaltBytes);
    p += kSealSaltBytes;
  }
  OPENSSL_cleanse(out, sizeof out);
  return keys;
}

absl::StatusOr<std::unique_ptr<Sealer>> Sealer::Create(SealMode mode,
                                                       const SealKey& key,
                                                       Use use) {
  if (mode == SealMode::kNone) {
    return absl::InvalidArgumentError("a Sealer needs mode mac or encrypt");
  }
  if (Ghash::Available() && AesCtr::Available()) {
    // AES-GCM from its parts: several times OpenSSL 3.0's GCM per core on
    // long messages (see ghash.h, aes_ctr.h), and the same bytes.
    auto aes = std::make_unique<AesCtr>(key.key);
    AesCtr::Block h = aes->EncryptBlock({});  // GCM's hash key
    auto ghash = std::make_unique<Ghash>(h);
    OPENSSL_cleanse(h.data(), h.size());
    return std::unique_ptr<Sealer>(
        new Sealer(mode, key, nullptr, std::move(aes), std::move(ghash)));
  }
  EVP_CIPHER* cipher = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  EVP_CIPHER_CTX* ctx = cipher == nullptr ? nullptr : EVP_CIPHER_CTX_new();
  // The use is fixed for the object's life (GHASH runs over the cipher's
  // output when encrypting, its input when decrypting): the key schedule
  // runs here once, and each message only sets its nonce.
  const int encrypt = use == Use::kSeal ? 1 : 0;
  if (ctx == nullptr || EVP_CipherInit_ex(ctx, cipher, nullptr, key.key.data(),
                                          nullptr, encrypt) != 1) {
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(cipher);
    return absl::InternalError("OpenSSL cannot run AES-256-GCM");
  }
  EVP_CIPHER_free(cipher);  // the context holds its own reference
  return std::unique_ptr<Sealer>(new Sealer(mode, key, ctx, nullptr, nullptr));
}

Sealer::Sealer(SealMode mode, const SealKey& key, void* ctx,
               std::unique_ptr<AesCtr> aes, std::unique_ptr<Ghash> ghash)
    : mode_(mode),
      key_(key),
      ctx_(ctx),
      aes_(std::move(aes)),
      ghash_(std::move(ghash)) {}

Sealer::~Sealer() { EVP_CIPHER_CTX_free(Ctx(ctx_)); }

void Sealer::Begin(uint64_t sequence) {
  uint8_t iv[kSealSaltBytes + sizeof(uint64_t)];
  std::memcpy(iv, key_.salt.data(), kSealSaltBytes);
  Store64(iv + kSealSaltBytes, sequence);
  failed_ = false;
  if (ghash_ != nullptr) {
    // GCM's counter blocks for a 96-bit nonce: the nonce, then 1 for the
    // tag's mask, 2 on for the body.
    AesCtr::Block j0{};
    std::memcpy(j0.data(), iv, sizeof iv);
    j0[15] = 1;
    mask_ = aes_->EncryptBlock(j0);
    j0[15] = 2;
    aes_->Start(j0);
    ghash_->Reset();
    ciphertext_ = false;
    return;
  }
  if (EVP_CipherInit_ex(Ctx(ctx_), nullptr, nullptr, nullptr, iv, -1) != 1) {
    failed_ = true;
  }
}

void Sealer::Associate(absl::Span<const uint8_t> data) {
  if (ghash_ != nullptr) {
    ghash_->Update(data.data(), data.size());
    return;
  }
  for (size_t done = 0; done < data.size();) {
    const size_t n = std::min(kPieceBytes, data.size() - done);
    int len = 0;
    if (EVP_CipherUpdate(Ctx(ctx_), nullptr, &len, data.data() + done,
                         static_cast<int>(n)) != 1) {
      failed_ = true;
    }
    done += n;
  }
}

void Sealer::Cipher(const uint8_t* in, uint8_t* out, size_t n) {
  int len = 0;
  if (EVP_CipherUpdate(Ctx(ctx_), out, &len, in, static_cast<int>(n)) != 1) {
    failed_ = true;
  }
}

void Sealer::HashCiphertext(const uint8_t* data, size_t n) {
  if (!ciphertext_) {
    ghash_->BeginCiphertext();
    ciphertext_ = true;
  }
  ghash_->Update(data, n);
}

void Sealer::SealBody(const uint8_t* in, uint8_t* out, size_t n) {
  for (size_t done = 0; done < n;) {
    const size_t piece = std::min(kPieceBytes, n - done);
    if (mode_ == SealMode::kEncrypt && ghash_ != nullptr) {
      // The piece is still in cache when GHASH reads what it became.
      aes_->Apply(in + done, out + done, piece);
      HashCiphertext(out + done, piece);
    } else if (mode_ == SealMode::kEncrypt) {
      Cipher(in + done, out + done, piece);
    } else {
      // The copy is what goes on the wire, so the tag covers the bytes
      // sent even where the pages change meanwhile (a live workload).
      if (in != out) std::memcpy(out + done, in + done, piece);
      Associate({out + done, piece});
    }
    done += piece;
  }
}

void Sealer::OpenBody(uint8_t* data, size_t n) {
  for (size_t done = 0; done < n;) {
    const size_t piece = std::min(kPieceBytes, n - done);
    if (mode_ == SealMode::kEncrypt && ghash_ != nullptr) {
      HashCiphertext(data + done, piece);
      aes_->Apply(data + done, data + done, piece);
    } else if (mode_ == SealMode::kEncrypt) {
      Cipher(data + done, data + done, piece);
    } else {
      Associate({data + done, piece});
    }
    done += piece;
  }
}

absl::StatusOr<SealTag> Sealer::FinishSeal() {
  if (ghash_ != nullptr) return ghash_->Finish(mask_);
  uint8_t none[16];
  int len = 0;
  SealTag tag{};
  if (failed_ || EVP_CipherFinal_ex(Ctx(ctx_), none, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(Ctx(ctx_), EVP_CTRL_GCM_GET_TAG, kSealTagBytes,
                          tag.data()) != 1) {
    return absl::InternalError("AES-256-GCM failed to seal a message");
  }
  return tag;
}

bool Sealer::FinishOpen(const SealTag& tag) {
  if (ghash_ != nullptr) {
    const SealTag want = ghash_->Finish(mask_);
    return CRYPTO_memcmp(want.data(), tag.data(), tag.size()) == 0;
  }
  uint8_t none[16];
  int len = 0;
  // The expected tag goes in first; the final call compares it with the
  // computed one (in constant time) and fails on a mismatch.
  SealTag copy = tag;
  return !failed_ &&
         EVP_CIPHER_CTX_ctrl(Ctx(ctx_), EVP_CTRL_GCM_SET_TAG, kSealTagBytes,
                             copy.data()) == 1 &&
         EVP_CipherFinal_ex(Ctx(ctx_), none, &len) == 1;
}

}  // namespace ramferry::proto
