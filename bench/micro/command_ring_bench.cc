// CommandRing: the SPSC hand-off between the scheduler and a channel.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <thread>

#include "engine/command_ring.h"

namespace ramferry::engine {
namespace {

constexpr uint32_t kMaxPages = 128;

void FillWrite(Command* c, uint64_t i) {
  c->type = CommandType::kWrite;
  c->region = 0;
  c->page_count = 1;
  c->barrier_seq = 0;
  c->round = 1;
  c->offsets[0] = i * 4096;
}

// One command at a time through an uncontended ring: BeginPush +
// CommitPush, then Peek(1) + At(0) + Release(1) on the same thread.
void BM_CommandRing_PushPeekReleaseOne(benchmark::State& state) {
  CommandRing ring(1024, kMaxPages);
  uint64_t i = 0, sum = 0;
  for (auto _ : state) {
    FillWrite(ring.BeginPush(), i++);
    ring.CommitPush();
    const uint32_t n = ring.Peek(1);
    sum += ring.At(0).offsets[0];
    ring.Release(n);
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_CommandRing_PushPeekReleaseOne);

// Batched consumer: push 128, one Peek(128), read all, one Release(128).
// Items are commands.
void BM_CommandRing_PushBatchRelease128(benchmark::State& state) {
  constexpr uint32_t kBatch = 128;
  CommandRing ring(1024, kMaxPages);
  uint64_t i = 0, sum = 0;
  for (auto _ : state) {
    for (uint32_t k = 0; k < kBatch; ++k) {
      FillWrite(ring.BeginPush(), i++);
      ring.CommitPush();
    }
    const uint32_t n = ring.Peek(kBatch);
    for (uint32_t k = 0; k < n; ++k) sum += ring.At(k).offsets[0];
    ring.Release(n);
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kBatch);
}
BENCHMARK(BM_CommandRing_PushBatchRelease128);

// Producer (the benchmark thread) and a consumer thread, spawned and joined
// every iteration, move kCommands commands through a ring of `entries`
// slots. The consumer takes what Peek offers (up to 128) and releases it as
// one batch, sleeping in WaitForWork when the ring is empty; the producer
// sleeps in BeginPush when it is full. Real time: the consumer's CPU is not
// in the benchmark thread's CPU time.
void BM_CommandRing_ProducerConsumer(benchmark::State& state) {
  constexpr uint64_t kCommands = 1 << 16;
  const uint32_t entries = static_cast<uint32_t>(state.range(0));
  CommandRing ring(entries, kMaxPages);
  uint64_t i = 0, sum = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    std::thread consumer([&ring, &sum] {
      uint64_t seen = 0, local = 0;
      while (seen < kCommands && ring.WaitForWork()) {
        const uint32_t n = ring.Peek(128);
        for (uint32_t k = 0; k < n; ++k) local += ring.At(k).offsets[0];
        ring.Release(n);
        seen += n;
      }
      sum += local;
    });
    for (uint64_t k = 0; k < kCommands; ++k) {
      FillWrite(ring.BeginPush(), i++);
      ring.CommitPush();
    }
    consumer.join();
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kCommands);
  // Share of the wall time the producer slept on a full ring.
  const double wall_ns = std::chrono::duration<double, std::nano>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  state.counters["producer_wait_frac"] =
      static_cast<double>(ring.producer_wait_ns()) / wall_ns;
}
BENCHMARK(BM_CommandRing_ProducerConsumer)
    ->ArgName("entries")
    ->Arg(64)
    ->Arg(1024)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ramferry::engine
