// The all-zero check every sender runs on each page (and the RDMA
// transport on each chunk) before deciding whether to send its bytes,
// base::IsAllZero, against the two alternatives it was chosen over.
//
// Args: bytes (a 4 KiB page or a 1 MiB chunk) and nonzero_at_start (0: the
// buffer is all zero, the worst case, a full scan; 1: its first byte is
// not, so a check can stop at once). Items are checks; bytes, reported for
// the all-zero case only, are bytes scanned.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/zero_page.h"

namespace ramferry {
namespace {

// As the rdma transport once tested a chunk: it equals itself shifted by
// one byte and starts with zero. memcmp reads every byte twice (two
// streams).
bool IsZeroMemcmp(const uint8_t* p, size_t len) {
  return p[0] == 0 && std::memcmp(p, p + 1, len - 1) == 0;
}

// One u64 at a time, stopping at the first non-zero word.
bool IsZeroWords(const uint8_t* p, size_t len) {
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w != 0) return false;
  }
  for (; i < len; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

template <bool (*IsZero)(const uint8_t*, size_t)>
void BM_ZeroCheck(benchmark::State& state) {
  const size_t len = static_cast<size_t>(state.range(0));
  const bool nonzero = state.range(1) != 0;
  std::unique_ptr<uint8_t, FreeDeleter> buf(
      static_cast<uint8_t*>(std::aligned_alloc(4096, len)));
  std::memset(buf.get(), 0, len);  // fault the pages in
  if (nonzero) buf.get()[0] = 1;
  const uint8_t* p = buf.get();
  for (auto _ : state) {
    benchmark::DoNotOptimize(p);  // no hoisting the check out of the loop
    const bool zero = IsZero(p, len);
    benchmark::DoNotOptimize(zero);
    if (zero == nonzero) {
      state.SkipWithError("wrong answer");
      break;
    }
  }
  // Bytes only where the check scans them all; an early exit reads one
  // word, and a chunk-size byte rate would be meaningless there.
  if (!nonzero) {
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                            static_cast<int64_t>(len));
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void ZeroArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"bytes", "nonzero_at_start"});
  for (int64_t len : {int64_t{4096}, int64_t{1} << 20}) {
    for (int64_t nonzero : {0, 1}) b->Args({len, nonzero});
  }
}

void BM_ZeroCheck_MemcmpShifted(benchmark::State& state) {
  BM_ZeroCheck<IsZeroMemcmp>(state);
}
void BM_ZeroCheck_WordLoop(benchmark::State& state) {
  BM_ZeroCheck<IsZeroWords>(state);
}
void BM_ZeroCheck_Block64Or(benchmark::State& state) {
  BM_ZeroCheck<base::IsAllZero>(state);
}
BENCHMARK(BM_ZeroCheck_MemcmpShifted)->Apply(ZeroArgs);
BENCHMARK(BM_ZeroCheck_WordLoop)->Apply(ZeroArgs);
BENCHMARK(BM_ZeroCheck_Block64Or)->Apply(ZeroArgs);

}  // namespace
}  // namespace ramferry
