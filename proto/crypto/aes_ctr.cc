#include "proto/crypto/aes_ctr.h"

// GCC 12's AVX-512 headers leave an operand of their masked builtins
// undefined on purpose, which -Wuninitialized reports at every use
// (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cpuid.h>
#include <immintrin.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <cstring>

namespace ramferry::proto {
namespace {

#define RAMFERRY_AES_TARGET \
  __attribute__((target("aes,avx512f,avx512bw,vaes,ssse3,sse4.1")))

using Block = AesCtr::Block;

RAMFERRY_AES_TARGET inline __m128i Load(const Block& b) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.data()));
}

// One step of the AES-256 key schedule (FIPS-197 5.2) for the even round
// key: `a` is the one two back, `assist` AESKEYGENASSIST of the last.
RAMFERRY_AES_TARGET inline __m128i NextEven(__m128i a, __m128i assist) {
  assist = _mm_shuffle_epi32(assist, 0xff);  // RotWord, SubWord, Rcon
  a = _mm_xor_si128(a, _mm_slli_si128(a, 4));
  a = _mm_xor_si128(a, _mm_slli_si128(a, 8));
  return _mm_xor_si128(a, assist);
}

// The odd round key: SubWord without rotation or Rcon.
RAMFERRY_AES_TARGET inline __m128i NextOdd(__m128i even, __m128i b) {
  const __m128i sub =
      _mm_shuffle_epi32(_mm_aeskeygenassist_si128(even, 0), 0xaa);
  b = _mm_xor_si128(b, _mm_slli_si128(b, 4));
  b = _mm_xor_si128(b, _mm_slli_si128(b, 8));
  return _mm_xor_si128(b, sub);
}

RAMFERRY_AES_TARGET void ExpandKey(const std::array<uint8_t, 32>& key,
                                   std::array<Block, 15>* rk) {
  __m128i k[15];
  k[0] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(key.data()));
  k[1] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(key.data() + 16));
  // The round constant is an immediate operand, so the steps are spelled
  // out.
#define RAMFERRY_AES_STEP(i, rcon)                                      \
  k[i] = NextEven(k[(i)-2], _mm_aeskeygenassist_si128(k[(i)-1], rcon)); \
  k[(i) + 1] = NextOdd(k[i], k[(i)-1]);
  RAMFERRY_AES_STEP(2, 0x01)
  RAMFERRY_AES_STEP(4, 0x02)
  RAMFERRY_AES_STEP(6, 0x04)
  RAMFERRY_AES_STEP(8, 0x08)
  RAMFERRY_AES_STEP(10, 0x10)
  RAMFERRY_AES_STEP(12, 0x20)
  k[14] = NextEven(k[12], _mm_aeskeygenassist_si128(k[13], 0x40));
#undef RAMFERRY_AES_STEP
  for (size_t i = 0; i < 15; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>((*rk)[i].data()), k[i]);
  }
  OPENSSL_cleanse(k, sizeof k);
}

RAMFERRY_AES_TARGET Block EncryptOne(const std::array<Block, 15>& rk,
                                     const Block& in) {
  __m128i x = _mm_xor_si128(Load(in), Load(rk[0]));
  for (size_t r = 1; r < 14; ++r) x = _mm_aesenc_si128(x, Load(rk[r]));
  x = _mm_aesenclast_si128(x, Load(rk[14]));
  Block out;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out.data()), x);
  return out;
}

// Batches' steps. Always inlined, and what they share is structs of named
// registers, not arrays: Batches keeps its round keys and the blocks in
// flight in registers only as long as neither a call nor an array comes
// between (as loops over arrays, GCC kept them on the stack).

// The 15 round keys, each in all four 128-bit lanes of a register.
struct WideKeys {
  __m512i k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, k10, k11, k12, k13, k14;
};

// The 16 blocks of one batch, four to a register.
struct Quad {
  __m512i x0, x1, x2, x3;
};

[[gnu::always_inline]] RAMFERRY_AES_TARGET inline __m512i Wide(const Block& b) {
  return _mm512_broadcast_i32x4(Load(b));
}

[[gnu::always_inline]] RAMFERRY_AES_TARGET inline WideKeys BroadcastKeys(
    const std::array<Block, 15>& rk) {
  return {Wide(rk[0]),  Wide(rk[1]),  Wide(rk[2]),  Wide(rk[3]),  Wide(rk[4]),
          Wide(rk[5]),  Wide(rk[6]),  Wide(rk[7]),  Wide(rk[8]),  Wide(rk[9]),
          Wide(rk[10]), Wide(rk[11]), Wide(rk[12]), Wide(rk[13]), Wide(rk[14])};
}

// The batch's counter blocks, in wire byte order, XORed with the first
// round key; advances the byte-reversed counters `c` past them.
[[gnu::always_inline]] RAMFERRY_AES_TARGET inline Quad WhitenedCounters(
    __m512i* c, __m512i reverse, __m512i k0) {
  const __m512i four =
      _mm512_set_epi32(0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4);
  Quad q;
  q.x0 = _mm512_xor_si512(_mm512_shuffle_epi8(*c, reverse), k0);
  *c = _mm512_add_epi32(*c, four);
  q.x1 = _mm512_xor_si512(_mm512_shuffle_epi8(*c, reverse), k0);
  *c = _mm512_add_epi32(*c, four);
  q.x2 = _mm512_xor_si512(_mm512_shuffle_epi8(*c, reverse), k0);
  *c = _mm512_add_epi32(*c, four);
  q.x3 = _mm512_xor_si512(_mm512_shuffle_epi8(*c, reverse), k0);
  *c = _mm512_add_epi32(*c, four);
  return q;
}

[[gnu::always_inline]] RAMFERRY_AES_TARGET inline void Round(Quad* q,
                                                             __m512i k) {
  q->x0 = _mm512_aesenc_epi128(q->x0, k);
  q->x1 = _mm512_aesenc_epi128(q->x1, k);
  q->x2 = _mm512_aesenc_epi128(q->x2, k);
  q->x3 = _mm512_aesenc_epi128(q->x3, k);
}

// Rounds 1 to 14 of whitened blocks: what is left is the keystream.
[[gnu::always_inline]] RAMFERRY_AES_TARGET inline void EncryptRounds(
    Quad* q, const WideKeys& k) {
  Round(q, k.k1);
  Round(q, k.k2);
  Round(q, k.k3);
  Round(q, k.k4);
  Round(q, k.k5);
  Round(q, k.k6);
  Round(q, k.k7);
  Round(q, k.k8);
  Round(q, k.k9);
  Round(q, k.k10);
  Round(q, k.k11);
  Round(q, k.k12);
  Round(q, k.k13);
  q->x0 = _mm512_aesenclast_epi128(q->x0, k.k14);
  q->x1 = _mm512_aesenclast_epi128(q->x1, k.k14);
  q->x2 = _mm512_aesenclast_epi128(q->x2, k.k14);
  q->x3 = _mm512_aesenclast_epi128(q->x3, k.k14);
}

// XORs one batch of input (AesCtr::kBatch bytes at `in`) into `q`.
[[gnu::always_inline]] RAMFERRY_AES_TARGET inline void XorInput(
    Quad* q, const uint8_t* in) {
  q->x0 = _mm512_xor_si512(q->x0, _mm512_loadu_si512(in));
  q->x1 = _mm512_xor_si512(q->x1, _mm512_loadu_si512(in + 64));
  q->x2 = _mm512_xor_si512(q->x2, _mm512_loadu_si512(in + 128));
  q->x3 = _mm512_xor_si512(q->x3, _mm512_loadu_si512(in + 192));
}

[[gnu::always_inline]] RAMFERRY_AES_TARGET inline void Store(const Quad& q,
                                                             uint8_t* out) {
  _mm512_storeu_si512(out, q.x0);
  _mm512_storeu_si512(out + 64, q.x1);
  _mm512_storeu_si512(out + 128, q.x2);
  _mm512_storeu_si512(out + 192, q.x3);
}

// XORs `batches` batches of 16 blocks of keystream, from counter block
// `counter` on, into in -> out; with in == nullptr it writes the
// keystream itself. Returns the counter block after the last. Spelled out
// round by round (in the steps above), so that the round keys and the
// four blocks in flight stay in registers.
RAMFERRY_AES_TARGET Block Batches(const std::array<Block, 15>& rk,
                                  const Block& counter, const uint8_t* in,
                                  uint8_t* out, size_t batches) {
  const __m512i reverse = _mm512_broadcast_i32x4(
      _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const WideKeys k = BroadcastKeys(rk);
  // Byte-reversed counters: lane j of c is block j of the batch.
  __m512i c = _mm512_add_epi32(
      _mm512_shuffle_epi8(_mm512_broadcast_i32x4(Load(counter)), reverse),
      _mm512_set_epi32(0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0));
  for (; batches > 0; --batches) {
    Quad q = WhitenedCounters(&c, reverse, k.k0);
    EncryptRounds(&q, k);
    if (in != nullptr) {
      XorInput(&q, in);
      in += AesCtr::kBatch;
    }
    Store(q, out);
    out += AesCtr::kBatch;
  }
  Block next;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(next.data()),
                   _mm_shuffle_epi8(_mm512_castsi512_si128(c),
                                    _mm512_castsi512_si128(reverse)));
  return next;
}

// VAES is CPUID leaf 7, ECX bit 9. Asked directly: clang 14's
// __builtin_cpu_supports has no name for it.
bool HasVaes() {
  unsigned eax = 0;
  unsigned ebx = 0;
  unsigned ecx = 0;
  unsigned edx = 0;
  constexpr unsigned kVaesBit = 1U << 9;
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 &&
         (ecx & kVaesBit) != 0;
}

}  // namespace

bool AesCtr::Available() {
  // avx512f asks libgcc's (and compiler-rt's) model, which also checks
  // that the OS saves the AVX-512 state (XGETBV); VAES adds no state.
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("aes") && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && HasVaes() &&
           __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("sse4.1");
  }();
  return available;
}

AesCtr::AesCtr(const std::array<uint8_t, 32>& key) {
  ExpandKey(key, &round_keys_);
}

AesCtr::~AesCtr() {
  OPENSSL_cleanse(round_keys_.data(), sizeof round_keys_);
  OPENSSL_cleanse(unused_.data(), unused_.size());
}

AesCtr::Block AesCtr::EncryptBlock(const Block& in) const {
  return EncryptOne(round_keys_, in);
}

void AesCtr::Start(const Block& counter) {
  counter_ = counter;
  unused_bytes_ = 0;
}

void AesCtr::Apply(const uint8_t* in, uint8_t* out, size_t n) {
  if (unused_bytes_ != 0) {
    const size_t take = std::min(n, unused_bytes_);
    const uint8_t* ks = unused_.data() + kBatch - unused_bytes_;
    for (size_t i = 0; i < take; ++i) out[i] = in[i] ^ ks[i];
    unused_bytes_ -= take;
    in += take;
    out += take;
    n -= take;
  }
  if (n >= kBatch) {
    counter_ = Batches(round_keys_, counter_, in, out, n / kBatch);
    in += n / kBatch * kBatch;
    out += n / kBatch * kBatch;
    n %= kBatch;
  }
  if (n != 0) {
    counter_ = Batches(round_keys_, counter_, nullptr, unused_.data(), 1);
    for (size_t i = 0; i < n; ++i) out[i] = in[i] ^ unused_[i];
    unused_bytes_ = kBatch - n;
  }
}

}  // namespace ramferry::proto
