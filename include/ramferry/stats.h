// Counters a session exposes. Each is read without stopping the channels;
// a snapshot is consistent per counter, not across counters.
#ifndef RAMFERRY_STATS_H_
#define RAMFERRY_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ramferry {

struct ChannelStats {
  uint32_t channel = 0;
  uint64_t packets = 0;        // data packets (SYNC/FINISH not counted)
  uint64_t pages = 0;          // in data packets, zero pages included
  uint64_t payload_bytes = 0;  // page bytes that travelled
  uint64_t header_bytes = 0;
  // Zero pages (kCapZeroPages): of `pages`, those that went as an offset
  // alone; and pages covered by ZERO_RANGES packets (the source never
  // touched them), in `zero_range_packets`. Neither is in payload_bytes.
  uint64_t zero_pages = 0;
  uint64_t untouched_pages = 0;
  uint64_t zero_range_packets = 0;
  // Destination: of zero_pages + untouched_pages, the pages it had to
  // zero-fill (the rest already read as zero and were not written).
  uint64_t zero_pages_written = 0;
  // Compression (kCapCompressedPages): packets whose payload went as a
  // zstd frame, the page bytes they held and the frame bytes that
  // travelled (in payload_bytes); time the channel spent compressing
  // (source) or expanding (destination).
  uint64_t compressed_packets = 0;
  uint64_t compressed_input_bytes = 0;
  uint64_t compressed_output_bytes = 0;
  uint64_t compress_ns = 0;
  uint64_t syncs = 0;     // SYNC packets (round barriers)
  uint64_t finishes = 0;  // FINISH packets (0 or 1)
  // Send side.
  uint64_t send_calls = 0;          // sendmsg / SQEs / ibv_post_send calls
  uint64_t submit_calls = 0;        // syscalls that submitted them
  uint64_t short_sends = 0;         // sends the kernel took only part of
  uint64_t zc_sends = 0;            // sends that asked for zero copy
  uint64_t zc_completions = 0;      // of those, completions reaped
  uint64_t zc_copied = 0;           // completions the kernel flagged as copied
  uint64_t zc_notifications = 0;    // notification messages read
  uint64_t enobufs_retries = 0;     // optmem/memlock pressure, retried
  uint64_t flushes = 0;             // waits for all completions
  uint64_t completion_wait_ns = 0;  // time blocked waiting for completions
  uint64_t max_slots_in_flight = 0;
  // Scheduler -> channel ring.
  uint64_t ring_max_occupancy = 0;
  uint64_t producer_wait_ns = 0;  // scheduler blocked on a full ring
  uint64_t producer_wait_max_ns = 0;
  uint64_t consumer_idle_max_ns = 0;  // channel thread asleep on empty ring
  // RDMA: the send queue (the seed's nb_sent counters) and registration.
  uint64_t rdma_posts = 0;            // ibv_post_send calls
  uint64_t rdma_wrs = 0;              // work requests posted
  uint64_t rdma_outstanding_max = 0;  // peak work requests in flight
  uint64_t rdma_sq_full_hits = 0;     // posts that had to wait for room
  uint64_t rdma_drains_to_zero = 0;   // times nothing was left in flight
  uint64_t inline_sends = 0;          // SENDs that went IBV_SEND_INLINE
  uint64_t inline_max_bytes = 0;      // the largest of them
  uint64_t inline_granted = 0;        // inline room the QP granted
  uint64_t register_round_trips = 0;  // REGISTER_REQUEST -> RESULT waits
  uint64_t register_batch_max = 0;    // most chunks in one request
  uint64_t chunks_registered = 0;
  uint64_t chunks_compressed = 0;  // zero chunks sent as COMPRESS
  // Per data packet, the time the transport took to accept it (includes
  // waiting for a header slot); approximate quantiles.
  uint64_t send_latency_p50_ns = 0;
  uint64_t send_latency_p99_ns = 0;
  // CPU time of the channel's own thread (0 in single-thread mode).
  uint64_t thread_cpu_ns = 0;
  // Receive side.
  uint64_t recv_calls = 0;
  // 1 if the session went on without this channel
  // (SessionOptions::survive_channel_loss); SessionStats::channels_lost
  // says when and why. In a Total(): how many channels were lost.
  uint64_t lost = 0;
};

// A data channel the session carried on without.
struct ChannelLoss {
  uint32_t channel = 0;
  // The round the channel was lost in: the oldest round the destination
  // had not confirmed. Its batches of that round went again on the other
  // channels.
  uint64_t round = 0;
  std::string reason;
};

struct SessionStats {
  std::vector<ChannelStats> channels;
  uint64_t rounds = 0;
  // Destination: connections refused (bad Hello, refusal, handshake
  // timeout, too many at once) and, of those, failed authentications.
  uint64_t connections_refused = 0;
  uint64_t auth_failures = 0;
  // In the order they were lost.
  std::vector<ChannelLoss> channels_lost;
  // Source: pages sent a second time because their channel was lost.
  uint64_t resent_pages = 0;
  ChannelStats Total() const;
};

// "channel 2 in round 3 (why); channel 0 in round 5 (why)", or "" for none.
std::string DescribeChannelLosses(const std::vector<ChannelLoss>& losses);

}  // namespace ramferry

#endif  // RAMFERRY_STATS_H_
