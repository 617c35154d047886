// Scheduler::ScheduleRound: a round's dirty pages of one 1 GiB region (4 KiB
// pages, 262144 of them) batched into 128-page WRITE commands over 4 rings.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "bench/micro/dirty_pattern.h"
#include "engine/command_ring.h"
#include "engine/scheduler.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/region.h"

namespace ramferry::engine {
namespace {

constexpr uint64_t kRegionBytes = uint64_t{1} << 30;
constexpr uint32_t kPageSize = 4096;
constexpr uint64_t kPages = kRegionBytes / kPageSize;
constexpr uint32_t kPacketPages = 128;
constexpr size_t kRings = 4;
// Room in every ring for a whole 100% round (2048 commands), so a push can
// never wait on a full ring whatever the least-loaded choice does.
constexpr uint32_t kRingEntries = 4096;

// Arg: dirty density in percent. Between iterations, outside the timing,
// the benchmark drains every ring (Peek + Release, no consumer thread) and
// refills the bitmap. Items are pages scheduled; bytes are the region bytes
// they cover (4 KiB each); commands is WRITE commands pushed per round and
// dirty_pages the pages in each round.
void BM_Scheduler_ScheduleRound1GiB4Rings(benchmark::State& state) {
  const int percent = static_cast<int>(state.range(0));
  const std::vector<uint64_t> pattern = bench::DirtyPattern(kPages, percent);
  const uint64_t dirty = bench::PatternPages(pattern);

  std::vector<std::unique_ptr<CommandRing>> owned;
  std::vector<CommandRing*> rings;
  for (size_t i = 0; i < kRings; ++i) {
    owned.push_back(std::make_unique<CommandRing>(kRingEntries, kPacketPages));
    rings.push_back(owned.back().get());
  }
  // The scheduler never touches region memory, only its geometry.
  std::vector<Region> regions(1);
  regions[0].id = 1;
  regions[0].name = "bench";
  regions[0].length = kRegionBytes;
  regions[0].page_size = kPageSize;
  DirtyBitmap bits(kPages);
  std::vector<DirtyBitmap*> dirty_list = {&bits};
  Scheduler scheduler(absl::MakeConstSpan(rings), absl::MakeConstSpan(regions),
                      kPacketPages);

  uint64_t round = 0, commands = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (CommandRing* ring : rings) {
      const uint32_t n = ring->Peek(kRingEntries);
      commands += n;
      ring->Release(n);
    }
    bench::Refill(bits, pattern);
    state.ResumeTiming();
    absl::StatusOr<Scheduler::Scheduled> got =
        scheduler.ScheduleRound(absl::MakeConstSpan(dirty_list), ++round);
    if (!got.ok()) {
      state.SkipWithError(got.status().ToString().c_str());
      break;
    }
    if (got->pages != dirty) {
      state.SkipWithError("scheduled the wrong number of pages");
      break;
    }
  }
  for (CommandRing* ring : rings) commands += ring->Peek(kRingEntries);

  const int64_t iters = static_cast<int64_t>(state.iterations());
  state.SetItemsProcessed(iters * static_cast<int64_t>(dirty));
  state.SetBytesProcessed(iters * static_cast<int64_t>(dirty) * kPageSize);
  state.counters["commands"] = benchmark::Counter(
      static_cast<double>(commands), benchmark::Counter::kAvgIterations);
  state.counters["dirty_pages"] = static_cast<double>(dirty);
}
BENCHMARK(BM_Scheduler_ScheduleRound1GiB4Rings)
    ->ArgName("density_pct")
    ->Arg(1)
    ->Arg(10)
    ->Arg(100)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace ramferry::engine
