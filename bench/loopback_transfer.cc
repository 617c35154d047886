#include "bench/loopback_transfer.h"

#include <malloc.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "bench/destination_process.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/receiver.h"
#include "ramferry/region.h"
#include "ramferry/sender.h"
#include "tools/common/cli.h"

namespace ramferry::bench {
namespace {

constexpr uint32_t kRegionId = 1;

// The destination process: map, prefault, listen, serve, hash.
[[noreturn]] void RunDestination(const TransferConfig& c, int out) {
  auto mem = MappedMemory::Allocate(c.bytes, {.huge_pages = c.huge_pages});
  if (!mem.ok()) {
    ReportLine(out, "error " + std::string(mem.status().message()));
    _exit(1);
  }
  if (c.prefault_destination) {
    if (absl::Status s = PrefaultForWrite((*mem)->data(), c.bytes); !s.ok()) {
      ReportLine(out, "error " + std::string(s.message()));
      _exit(1);
    }
  }
  Region region{kRegionId, "bench", (*mem)->data(), c.bytes, kPageSize};
  SessionOptions opt = c.session;
  opt.port = 0;  // any free port; the source learns it from the pipe
  if (!c.listen_host.empty()) opt.host = c.listen_host;
  opt.channel_endpoints.clear();  // the source's
  auto rx = Receiver::Listen(opt, {&region, 1});
  if (!rx.ok()) {
    ReportLine(out, "error " + std::string(rx.status().message()));
    _exit(1);
  }
  ReportLine(out, absl::StrFormat("port %d", (*rx)->port()));
  double cpu0 = cli::ProcessCpuSeconds();
  absl::Status s = (*rx)->Serve();
  double cpu = cli::ProcessCpuSeconds() - cpu0;
  if (!s.ok()) {
    ReportLine(out, "error " + std::string(s.message()));
    _exit(1);
  }
  const ChannelStats total = (*rx)->stats().Total();
  ReportLine(out, absl::StrFormat("done %.6f %d %d", cpu,
                                  XXH3_64bits((*mem)->data(), c.bytes),
                                  total.recv_calls));
  _exit(0);
}

// Heap in use over every malloc arena, large mmapped blocks included.
uint64_t HeapInUseBytes() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

uint64_t ReadVmPinBytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  uint64_t kb = 0;
  while (f >> key) {
    if (key == "VmPin:" && f >> kb) return kb * 1024;
  }
  return 0;
}

// Rewrites a fraction of pages with new content and marks them dirty.
void DirtySomePages(uint8_t* base, uint64_t pages, double fraction,
                    uint64_t seed, DirtyBitmap* dirty) {
  std::mt19937_64 rng(seed);
  const uint64_t n = static_cast<uint64_t>(pages * fraction);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t page = rng() % pages;
    FillRandom(base + page * kPageSize, kPageSize, rng(), 1);
    dirty->Set(page);
  }
}

absl::StatusOr<TransferResult> RunSource(const TransferConfig& c,
                                         uint16_t port) {
  auto mem = MappedMemory::Allocate(c.bytes, {.huge_pages = c.huge_pages});
  if (!mem.ok()) return mem.status();
  uint8_t* base = (*mem)->data();
  FillRandom(base, c.bytes, c.seed);
  Region region{kRegionId, "bench", base, c.bytes, kPageSize};
  SessionOptions opt = c.session;
  opt.port = port;
  // The bench checks the result with its own whole-region digest, outside
  // the timing; per-page digests would only add to the measured CPU.
  opt.verify = VerifyMode::kReread;

  TransferResult result;
  cli::ProgressLine progress(c.progress);
  // Pinned memory (VmPin: io_uring registered buffers and the like) and
  // the heap the session adds (the engine's own memory: header slots,
  // command rings, scheduler state, and the caller's dirty bitmap), while
  // the transfer runs, sampled. The region itself is mapped, not malloced.
  const uint64_t heap_before = HeapInUseBytes();
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling.load()) {
      result.vm_pin_peak_bytes =
          std::max(result.vm_pin_peak_bytes, ReadVmPinBytes());
      const uint64_t heap = HeapInUseBytes();
      if (heap > heap_before) {
        result.sender_heap_peak_bytes =
            std::max(result.sender_heap_peak_bytes, heap - heap_before);
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
  });
  absl::Cleanup stop_sampling = [&] {
    sampling.store(false);
    sampler.join();
  };
  const absl::Time connect_start = absl::Now();
  auto sender = Sender::Connect(opt, {&region, 1});
  if (!sender.ok()) return sender.status();
  result.setup_seconds = absl::ToDoubleSeconds(absl::Now() - connect_start);
  for (const std::string& w : (*sender)->warnings()) {
    std::fprintf(stderr, "ramferry-bench: warning: %s\n", w.c_str());
  }
  DirtyBitmap dirty(region.page_count());
  result.dirty_bitmap_bytes = (region.page_count() + 7) / 8;
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  // The transfer phase, as the raw baseline measures it: rounds only, not
  // connecting or finishing.
  const double cpu0 = cli::ProcessCpuSeconds();
  absl::Duration sending;
  for (uint32_t r = 0; r < c.rounds; ++r) {
    if (r > 0) {
      DirtySomePages(base, region.page_count(), c.dirty_fraction,
                     c.seed * 1000 + r, &dirty);
    }
    const absl::Time round_start = absl::Now();
    RAMFERRY_ASSIGN_OR_RETURN(RoundResult rr, (*sender)->SendRound(bitmaps));
    sending += absl::Now() - round_start;
    result.bytes += rr.bytes;
    result.rounds++;
    double s = absl::ToDoubleSeconds(rr.elapsed);
    progress.Update(
        absl::StrFormat("round %d: %s in %.2fs (%.2f GB/s)", r,
                        cli::FormatBytes(rr.bytes), s, rr.bytes / s / 1e9),
        /*force=*/true);
  }
  result.seconds = absl::ToDoubleSeconds(sending);
  result.sender_cpu_s = cli::ProcessCpuSeconds() - cpu0;
  RAMFERRY_RETURN_IF_ERROR((*sender)->Finish());
  result.sender = (*sender)->stats();
  progress.Done();
  result.source_digest = XXH3_64bits(base, c.bytes);
  return result;
}

}  // namespace

absl::StatusOr<TransferResult> RunLoopbackTransfer(const TransferConfig& c) {
  absl::StatusOr<std::unique_ptr<DestinationProcess>> dest =
      DestinationProcess::Fork([&](int out) { RunDestination(c, out); });
  if (!dest.ok()) return dest.status();
  absl::StatusOr<std::string> line = (*dest)->ReadLine(absl::Seconds(120));
  uint32_t port = 0;
  if (!line.ok() || !absl::StartsWith(*line, "port ") ||
      !absl::SimpleAtoi(line->substr(5), &port)) {
    return line.ok() ? absl::InternalError("bad port line: " + *line)
                     : line.status();
  }
  absl::StatusOr<TransferResult> r = RunSource(c, static_cast<uint16_t>(port));
  if (!r.ok()) return r.status();
  line = (*dest)->ReadLine(absl::Seconds(120));
  if (!line.ok()) return line.status();
  (*dest)->Reap();
  std::vector<std::string> f = absl::StrSplit(*line, ' ');
  if (f.size() != 4 || f[0] != "done" ||
      !absl::SimpleAtod(f[1], &r->receiver_cpu_s) ||
      !absl::SimpleAtoi(f[2], &r->destination_digest) ||
      !absl::SimpleAtoi(f[3], &r->receiver_recv_calls)) {
    return absl::InternalError("bad result line: " + *line);
  }
  r->verified = r->destination_digest == r->source_digest;
  return r;
}

}  // namespace ramferry::bench
