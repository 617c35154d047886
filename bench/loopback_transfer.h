// One measured transfer on loopback: the destination runs in a forked
// child process (so each side's CPU time is its own), the source in this
// process. Both ends hash their whole region at the end; "verified" means
// the hashes match.
#ifndef RAMFERRY_BENCH_LOOPBACK_TRANSFER_H_
#define RAMFERRY_BENCH_LOOPBACK_TRANSFER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "ramferry/options.h"
#include "ramferry/stats.h"

namespace ramferry::bench {

struct TransferConfig {
  SessionOptions session;
  // The destination's address, when not session.host: 0.0.0.0 where the
  // channels spread over several of this host's addresses.
  std::string listen_host;
  uint64_t bytes = 1ull << 30;
  uint32_t rounds = 1;
  // Rounds after the first resend this fraction of pages, rewritten first.
  double dirty_fraction = 0.1;
  bool prefault_destination = true;
  bool huge_pages = false;
  // Raw baseline only: see bench/raw_baseline.h.
  bool raw_whole_receive = false;
  uint64_t seed = 1;
  bool progress = true;
};

struct TransferResult {
  uint64_t bytes = 0;  // page bytes sent over all rounds
  uint64_t rounds = 0;
  double seconds = 0;        // the rounds: first start to last confirmed
  double setup_seconds = 0;  // connect, handshake, region agreement
  double sender_cpu_s = 0;
  double receiver_cpu_s = 0;
  uint64_t source_digest = 0;  // XXH3-64 of the whole region, each side
  uint64_t destination_digest = 0;
  bool verified = false;  // the digests match
  SessionStats sender;
  uint64_t receiver_recv_calls = 0;
  uint64_t vm_pin_peak_bytes = 0;  // sampled VmPin of the source process
  // Sampled peak of the heap the source's session added (engine state and
  // the dirty bitmap), and the bitmap's share of it.
  uint64_t sender_heap_peak_bytes = 0;
  uint64_t dirty_bitmap_bytes = 0;
};

absl::StatusOr<TransferResult> RunLoopbackTransfer(const TransferConfig& c);

}  // namespace ramferry::bench

#endif  // RAMFERRY_BENCH_LOOPBACK_TRANSFER_H_
