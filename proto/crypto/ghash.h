// GHASH, the universal hash under AES-GCM's tag, with VPCLMULQDQ on 512-bit
// registers: 32 blocks per reduction, several times OpenSSL 3.0's
// 128-bit PCLMULQDQ loop on the long authenticated-only messages of
// SealMode::kMac (each page of a packet is associated data), and over the
// ciphertext of kEncrypt beside AesCtr (proto/crypto/aes_ctr.h). The tag it
// leads to is AES-GCM's to the bit: a peer that uses OpenSSL for it (an
// older build, a machine without the instructions) interoperates, and the
// tests check it against OpenSSL on every length and split.
//
// Blocks are held byte-reversed, so that a 128-bit integer's bit order is
// the field's; products are shifted left by one and reduced modulo
// x^128 + x^7 + x^2 + x + 1 in that order (Gueron and Kounavis, "Intel
// Carry-Less Multiplication Instruction and its Usage for Computing the
// GCM Mode"). The reduction is linear, so the products of 32 blocks by
// H^32 .. H^1 are summed unreduced and reduced once; the running state
// joins them last (times H^32), so the one chain from a block of blocks
// to the next is one multiplication and a reduction.
//
// Not thread-safe; one per direction, like the Sealer that owns it.
#ifndef RAMFERRY_PROTO_CRYPTO_GHASH_H_
#define RAMFERRY_PROTO_CRYPTO_GHASH_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace ramferry::proto {

class Ghash {
 public:
  // Whether this CPU has what the fast path needs (AVX-512F/BW,
  // VPCLMULQDQ, PCLMULQDQ, SSSE3). Where it does not, the Sealer keeps
  // OpenSSL's GCM for everything.
  static bool Available();

  // `h`: the hash key, AES_K(0^128), as the cipher returns it.
  explicit Ghash(const std::array<uint8_t, 16>& h);
  // The key's powers and the state are wiped.
  ~Ghash();
  Ghash(const Ghash&) = delete;
  Ghash& operator=(const Ghash&) = delete;

  // Starts a message.
  void Reset();
  // Associated data, in pieces of any size: one stream; after
  // BeginCiphertext, the ciphertext, the same way.
  void Update(const uint8_t* data, size_t n);
  // Ends the associated data (GCM pads it to a block) and starts the
  // ciphertext. At most once per message.
  void BeginCiphertext();
  // The hash over the data so far and GCM's length block, XORed with
  // `mask` (AES_K(J0)): the tag.
  std::array<uint8_t, 16> Finish(const std::array<uint8_t, 16>& mask);

 private:
  void Blocks(const uint8_t* data, size_t blocks);
  // Hashes the partial block, zero-padded, if there is one.
  void FlushPartial();

  static constexpr int kStride = 32;  // blocks per reduction
  // H^1 .. H^32, byte-reversed, at [32 - k] for H^k: the order one load
  // of four takes them for four consecutive blocks.
  alignas(64) std::array<std::array<uint8_t, 16>, kStride> powers_{};
  alignas(16) std::array<uint8_t, 16> y_{};  // the state, byte-reversed
  std::array<uint8_t, 16> partial_{};
  size_t partial_bytes_ = 0;
  uint64_t total_bytes_ = 0;       // of the stream Update takes now
  uint64_t associated_bytes_ = 0;  // once the ciphertext began
  bool ciphertext_ = false;
};

}  // namespace ramferry::proto

#endif  // RAMFERRY_PROTO_CRYPTO_GHASH_H_
