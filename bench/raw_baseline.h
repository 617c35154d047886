// The yardstick: a plain socket send loop with the same connection count
// and send size as the engine, memory to memory, no engine at all. Each
// connection carries one contiguous slice of the region; the receiver
// reads it straight into the same slice of its own pre-faulted region, in
// reads of the send size (a receiver of packets learns from each header
// where the next payload goes, so it cannot ask for more than a packet).
// With raw_whole_receive the receiver instead asks for the whole slice in
// one MSG_WAITALL call: a bound no packetised protocol can reach, which on
// loopback is markedly faster (the receiver sleeps through the transfer
// instead of waking per read).
#ifndef RAMFERRY_BENCH_RAW_BASELINE_H_
#define RAMFERRY_BENCH_RAW_BASELINE_H_

#include "absl/status/statusor.h"
#include "bench/loopback_transfer.h"

namespace ramferry::bench {

// Uses c.bytes, c.session.channels (connections), c.session.packet_pages
// (send size = pages x 4 KiB), c.session.host, c.prefault_destination,
// c.huge_pages, c.raw_whole_receive and c.seed.
absl::StatusOr<TransferResult> RunRawBaseline(const TransferConfig& c);

}  // namespace ramferry::bench

#endif  // RAMFERRY_BENCH_RAW_BASELINE_H_
