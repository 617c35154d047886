#include "proto/crypto/ghash.h"

// GCC 12's AVX-512 headers leave an operand of their masked builtins
// undefined on purpose, which -Wuninitialized reports at every use
// (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <cstring>

namespace ramferry::proto {
namespace {

#define RAMFERRY_GHASH_TARGET \
  __attribute__((target("avx512f,avx512bw,vpclmulqdq,pclmul,ssse3,sse4.1")))

RAMFERRY_GHASH_TARGET inline __m128i Reverse(__m128i x) {
  return _mm_shuffle_epi8(
      x, _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

// [hi:lo], an unreduced 256-bit product of two byte-reversed elements,
// shifted left by one and reduced (the paper's Algorithm, second half).
RAMFERRY_GHASH_TARGET inline __m128i Reduce(__m128i lo, __m128i hi) {
  __m128i t7 = _mm_srli_epi32(lo, 31);
  __m128i t8 = _mm_srli_epi32(hi, 31);
  lo = _mm_slli_epi32(lo, 1);
  hi = _mm_slli_epi32(hi, 1);
  const __m128i t9 = _mm_srli_si128(t7, 12);
  t8 = _mm_slli_si128(t8, 4);
  t7 = _mm_slli_si128(t7, 4);
  lo = _mm_or_si128(lo, t7);
  hi = _mm_or_si128(hi, t8);
  hi = _mm_or_si128(hi, t9);
  t7 = _mm_xor_si128(_mm_slli_epi32(lo, 31), _mm_slli_epi32(lo, 30));
  t7 = _mm_xor_si128(t7, _mm_slli_epi32(lo, 25));
  t8 = _mm_srli_si128(t7, 4);
  t7 = _mm_slli_si128(t7, 12);
  lo = _mm_xor_si128(lo, t7);
  __m128i t2 = _mm_xor_si128(_mm_srli_epi32(lo, 1), _mm_srli_epi32(lo, 2));
  t2 = _mm_xor_si128(t2, _mm_srli_epi32(lo, 7));
  t2 = _mm_xor_si128(t2, t8);
  lo = _mm_xor_si128(lo, t2);
  return _mm_xor_si128(hi, lo);
}

// a * b, both byte-reversed.
RAMFERRY_GHASH_TARGET inline __m128i Multiply(__m128i a, __m128i b) {
  __m128i lo = _mm_clmulepi64_si128(a, b, 0x00);
  __m128i hi = _mm_clmulepi64_si128(a, b, 0x11);
  __m128i mid = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x10),
                              _mm_clmulepi64_si128(a, b, 0x01));
  lo = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
  hi = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
  return Reduce(lo, hi);
}

// Four lanes' products x * h, unreduced, into lo, hi and mid (the two
// cross products, summed).
RAMFERRY_GHASH_TARGET inline void Accumulate(__m512i x, __m512i h, __m512i* lo,
                                             __m512i* hi, __m512i* mid) {
  *lo = _mm512_xor_si512(*lo, _mm512_clmulepi64_epi128(x, h, 0x00));
  *hi = _mm512_xor_si512(*hi, _mm512_clmulepi64_epi128(x, h, 0x11));
  *mid = _mm512_ternarylogic_epi64(*mid, _mm512_clmulepi64_epi128(x, h, 0x10),
                                   _mm512_clmulepi64_epi128(x, h, 0x01), 0x96);
}

// The XOR of a 512-bit register's four 128-bit lanes.
RAMFERRY_GHASH_TARGET inline __m128i FoldLanes(__m512i x) {
  const __m256i half = _mm256_xor_si256(_mm512_castsi512_si256(x),
                                        _mm512_extracti64x4_epi64(x, 1));
  return _mm_xor_si128(_mm256_castsi256_si128(half),
                       _mm256_extracti128_si256(half, 1));
}

using Powers = std::array<std::array<uint8_t, 16>, 32>;

RAMFERRY_GHASH_TARGET void PowersOf(const std::array<uint8_t, 16>& h,
                                    Powers* p) {
  const __m128i h1 =
      Reverse(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h.data())));
  __m128i power = h1;
  for (size_t k = 1; k <= p->size(); ++k) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>((*p)[p->size() - k].data()),
                     power);
    power = Multiply(power, h1);
  }
}

// y = (...((y ^ x1) * H ^ x2) * H ...) * H over `blocks` blocks at `data`.
RAMFERRY_GHASH_TARGET void HashBlocks(const Powers& powers, uint8_t* state,
                                      const uint8_t* data, size_t blocks) {
  __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));
  const __m512i reverse = _mm512_broadcast_i32x4(
      _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const auto* p = reinterpret_cast<const uint8_t*>(powers.data());
  __m512i h[8];  // h[j]: H^(32 - 4j) .. H^(29 - 4j)
  for (size_t j = 0; j < 8; ++j) h[j] = _mm512_loadu_si512(p + 64 * j);
  const __m128i h32 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  for (; blocks >= 32; blocks -= 32, data += 512) {
    __m512i lo = _mm512_setzero_si512();
    __m512i hi = _mm512_setzero_si512();
    __m512i mid = _mm512_setzero_si512();
    for (size_t j = 0; j < 8; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(data + 4096 + 64 * j),
                   _MM_HINT_T0);
      const __m512i x =
          _mm512_shuffle_epi8(_mm512_loadu_si512(data + 64 * j), reverse);
      Accumulate(x, h[j], &lo, &hi, &mid);
    }
    // The state, times H^32, joins last: off the loads' and products' way.
    __m128i l = _mm_xor_si128(FoldLanes(lo), _mm_clmulepi64_si128(y, h32, 0));
    __m128i u =
        _mm_xor_si128(FoldLanes(hi), _mm_clmulepi64_si128(y, h32, 0x11));
    __m128i m = _mm_xor_si128(
        FoldLanes(mid), _mm_xor_si128(_mm_clmulepi64_si128(y, h32, 0x10),
                                      _mm_clmulepi64_si128(y, h32, 0x01)));
    l = _mm_xor_si128(l, _mm_slli_si128(m, 8));
    u = _mm_xor_si128(u, _mm_srli_si128(m, 8));
    y = Reduce(l, u);
  }
  const __m128i h1 =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(powers.back().data()));
  for (; blocks > 0; --blocks, data += 16) {
    const __m128i x =
        Reverse(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data)));
    y = Multiply(_mm_xor_si128(y, x), h1);
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), y);
}

}  // namespace

bool Ghash::Available() {
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("vpclmulqdq") &&
           __builtin_cpu_supports("pclmul") &&
           __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("sse4.1");
  }();
  return available;
}

Ghash::Ghash(const std::array<uint8_t, 16>& h) { PowersOf(h, &powers_); }

Ghash::~Ghash() {
  OPENSSL_cleanse(powers_.data(), sizeof powers_);
  OPENSSL_cleanse(y_.data(), y_.size());
  OPENSSL_cleanse(partial_.data(), partial_.size());
}

void Ghash::Reset() {
  y_.fill(0);
  partial_bytes_ = 0;
  total_bytes_ = 0;
  associated_bytes_ = 0;
  ciphertext_ = false;
}

void Ghash::Blocks(const uint8_t* data, size_t blocks) {
  HashBlocks(powers_, y_.data(), data, blocks);
}

void Ghash::Update(const uint8_t* data, size_t n) {
  total_bytes_ += n;
  if (partial_bytes_ != 0) {
    const size_t take = std::min(n, 16 - partial_bytes_);
    std::memcpy(partial_.data() + partial_bytes_, data, take);
    partial_bytes_ += take;
    data += take;
    n -= take;
    if (partial_bytes_ < 16) return;
    Blocks(partial_.data(), 1);
    partial_bytes_ = 0;
  }
  if (n >= 16) {
    Blocks(data, n / 16);
    data += n / 16 * 16;
    n %= 16;
  }
  if (n != 0) {
    std::memcpy(partial_.data(), data, n);
    partial_bytes_ = n;
  }
}

void Ghash::FlushPartial() {
  if (partial_bytes_ == 0) return;
  std::memset(partial_.data() + partial_bytes_, 0, 16 - partial_bytes_);
  Blocks(partial_.data(), 1);
  partial_bytes_ = 0;
}

void Ghash::BeginCiphertext() {
  FlushPartial();
  associated_bytes_ = total_bytes_;
  total_bytes_ = 0;
  ciphertext_ = true;
}

std::array<uint8_t, 16> Ghash::Finish(const std::array<uint8_t, 16>& mask) {
  FlushPartial();
  // GCM's last block: the associated data's length in bits, then the
  // ciphertext's, each 64-bit big-endian.
  const uint64_t associated = ciphertext_ ? associated_bytes_ : total_bytes_;
  const uint64_t ciphertext = ciphertext_ ? total_bytes_ : 0;
  std::array<uint8_t, 16> lengths{};
  for (int i = 0; i < 8; ++i) {
    lengths[7 - i] = static_cast<uint8_t>(associated * 8 >> (8 * i));
    lengths[15 - i] = static_cast<uint8_t>(ciphertext * 8 >> (8 * i));
  }
  Blocks(lengths.data(), 1);
  std::array<uint8_t, 16> tag;
  // y_ is byte-reversed: reversed back, it is GHASH's output.
  for (int i = 0; i < 16; ++i) tag[i] = y_[15 - i] ^ mask[i];
  return tag;
}

}  // namespace ramferry::proto
