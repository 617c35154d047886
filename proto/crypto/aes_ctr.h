// AES-256 in counter mode as GCM runs it, with VAES on 512-bit registers:
// 16 blocks in flight, four to a register, so a core keeps its AES units
// busy where OpenSSL 3.0's GCM runs one 128-bit block per instruction.
// With Ghash (proto/crypto/ghash.h) beside it this is AES-256-GCM to the bit
// (the tests check it against OpenSSL, and against a block-at-a-time reference
// across the counter's wrap).
//
// GCM counts with inc32: only the counter block's last four bytes, a
// big-endian number, advance, and they wrap to 0 without a carry into the
// nonce. Each 128-bit lane of a register here holds its block byte-reversed,
// so those four bytes are the lane's lowest 32-bit word and a 32-bit add
// is inc32, wrap included.
//
// Not thread-safe; one per direction, like the Sealer that owns it.
#ifndef RAMFERRY_PROTO_CRYPTO_AES_CTR_H_
#define RAMFERRY_PROTO_CRYPTO_AES_CTR_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace ramferry::proto {

class AesCtr {
 public:
  using Block = std::array<uint8_t, 16>;
  static constexpr size_t kBatch =
      size_t{16} * 16;  // keystream bytes per batch

  // Whether this CPU has what it needs (AES-NI, VAES, AVX-512F/BW).
  static bool Available();

  explicit AesCtr(const std::array<uint8_t, 32>& key);
  // The key schedule and any unused keystream are wiped.
  ~AesCtr();
  AesCtr(const AesCtr&) = delete;
  AesCtr& operator=(const AesCtr&) = delete;

  // AES_K(block): GCM's hash key (of the zero block) and a message's tag
  // mask (of its first counter block).
  Block EncryptBlock(const Block& in) const;
  // Starts a keystream at counter block `counter`.
  void Start(const Block& counter);
  // out = in XOR the keystream's next n bytes (any n; in == out allowed).
  void Apply(const uint8_t* in, uint8_t* out, size_t n);

 private:
  alignas(64) std::array<Block, 15> round_keys_{};
  Block counter_{};  // the next batch's first counter block
  // Keystream of the last batch that Apply did not use, at its end.
  alignas(64) std::array<uint8_t, kBatch> unused_{};
  size_t unused_bytes_ = 0;
};

}  // namespace ramferry::proto

#endif  // RAMFERRY_PROTO_CRYPTO_AES_CTR_H_
