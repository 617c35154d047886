// DirtyBitmap: the per-round scan of a large region's bitmap, and the cost
// of marking pages dirty from several threads.
#include <benchmark/benchmark.h>

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "bench/micro/dirty_pattern.h"
#include "ramferry/dirty_bitmap.h"

namespace ramferry {
namespace {

// A 64 GiB region of 4 KiB pages: 16M pages, 256K words, 2 MiB of bits.
constexpr uint64_t kPages = (uint64_t{64} << 30) / 4096;

// TakeWord over every word, visiting each set bit (countr_zero, clear
// lowest): what a round does to find its pages. Arg: dirty density in
// percent. The bitmap is refilled between iterations, outside the timing.
// Bytes are bitmap bytes scanned (2 MiB per pass); items are pages covered
// (16M per pass); dirty_pages is set bits visited per second.
//
// kPeekFirst: read each word first (PeekWord, a plain load) and take it
// (the locked exchange) only when it has bits. Not what the scheduler does
// today: a comparison, to price the exchange on clean words. A page set
// between the peek and the skip stays for the next round, as the bitmap's
// contract allows.
template <bool kPeekFirst>
void BM_DirtyBitmapScan64GiB(benchmark::State& state) {
  const int percent = static_cast<int>(state.range(0));
  const std::vector<uint64_t> pattern = bench::DirtyPattern(kPages, percent);
  const uint64_t dirty = bench::PatternPages(pattern);
  DirtyBitmap bits(kPages);
  uint64_t sum = 0;
  for (auto _ : state) {
    state.PauseTiming();
    bench::Refill(bits, pattern);
    state.ResumeTiming();
    uint64_t seen = 0;
    for (size_t w = 0; w < bits.words(); ++w) {
      if constexpr (kPeekFirst) {
        if (bits.PeekWord(w) == 0) continue;
      }
      uint64_t word = bits.TakeWord(w);
      while (word != 0) {
        sum += w * 64 + static_cast<uint64_t>(std::countr_zero(word));
        word &= word - 1;
        ++seen;
      }
    }
    if (seen != dirty) {
      state.SkipWithError("scan saw the wrong number of pages");
      break;
    }
  }
  benchmark::DoNotOptimize(sum);
  const int64_t iters = static_cast<int64_t>(state.iterations());
  state.SetBytesProcessed(iters * static_cast<int64_t>(bits.words() * 8));
  state.SetItemsProcessed(iters * static_cast<int64_t>(kPages));
  state.counters["dirty_pages"] = benchmark::Counter(
      static_cast<double>(dirty) * static_cast<double>(iters),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DirtyBitmapScan64GiB<false>)
    ->Name("BM_DirtyBitmap_TakeAndScan64GiB")
    ->ArgName("density_pct")
    ->Arg(0)
    ->Arg(1)
    ->Arg(100)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DirtyBitmapScan64GiB<true>)
    ->Name("BM_DirtyBitmap_PeekTakeAndScan64GiB")
    ->ArgName("density_pct")
    ->Arg(0)
    ->Arg(1)
    ->Arg(100)
    ->Unit(benchmark::kMicrosecond);

// One bitmap shared by the Set benchmarks' threads (set up once, never
// freed, so no thread races its construction).
DirtyBitmap& SharedBitmap() {
  static DirtyBitmap* bits = new DirtyBitmap(kPages);
  return *bits;
}

// Set of uniformly random pages over the whole 64 GiB bitmap, each thread
// with its own page list: the atomic OR plus cache misses on 2 MiB of bits,
// with threads rarely touching the same line. Items are Set calls, summed
// over threads (real time).
void BM_DirtyBitmap_SetRandomPages(benchmark::State& state) {
  DirtyBitmap& bits = SharedBitmap();
  constexpr size_t kList = 1 << 14;
  std::vector<uint64_t> pages(kList);
  std::mt19937_64 rng(1000 + static_cast<uint64_t>(state.thread_index()));
  for (uint64_t& p : pages) p = rng() % kPages;
  size_t i = 0;
  for (auto _ : state) {
    bits.Set(pages[i]);
    i = (i + 1) & (kList - 1);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_DirtyBitmap_SetRandomPages)->Threads(1)->Threads(2)->UseRealTime();

// Set of consecutive pages, each thread in its own half of the bitmap (a
// writer sweeping through memory): the uncontended atomic OR on a hot line.
void BM_DirtyBitmap_SetSequentialOwnRange(benchmark::State& state) {
  DirtyBitmap& bits = SharedBitmap();
  const uint64_t span = kPages / static_cast<uint64_t>(state.threads());
  const uint64_t first = span * static_cast<uint64_t>(state.thread_index());
  uint64_t i = 0;
  for (auto _ : state) {
    bits.Set(first + i);
    if (++i == span) i = 0;
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_DirtyBitmap_SetSequentialOwnRange)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// Every thread sets (its own) bits of the same word: the worst case, one
// cache line bounced between cores on every Set.
void BM_DirtyBitmap_SetSameWordContended(benchmark::State& state) {
  DirtyBitmap& bits = SharedBitmap();
  const uint64_t base = 32 * static_cast<uint64_t>(state.thread_index() % 2);
  uint64_t i = 0;
  for (auto _ : state) {
    bits.Set(base + (i++ & 31));
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_DirtyBitmap_SetSameWordContended)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

}  // namespace
}  // namespace ramferry
