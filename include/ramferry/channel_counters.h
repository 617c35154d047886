// The per-channel counters, each named once. Every row is
//   X(field, merge, json, "what it counts")
// - field: the ChannelStats member (a uint64_t). A time holds nanoseconds
//   and its name ends in _ns.
// - merge: how SessionStats::Total() combines channels: kSum adds them,
//   kMax keeps the largest (peaks and quantiles do not add up).
// - json: how the JSON reports it: kCount as is; kSeconds and kMicros, a
//   time, in seconds or microseconds, its key ending in _s or _us instead
//   of _ns (compress_ns is "compress_s").
// ChannelStats' fields, the transport's counters, Total() and the JSON
// writers are all made from these lists.
#ifndef RAMFERRY_CHANNEL_COUNTERS_H_
#define RAMFERRY_CHANNEL_COUNTERS_H_

// What the engine counts on each channel, source or destination.
//
// Zero pages (kFeatureZeroPages) are in `pages` but not in `payload_bytes`.
// Compression (kFeatureCompressedPages): the frame bytes that travelled are in
// `payload_bytes`.
#define RAMFERRY_ENGINE_COUNTERS(X)                                            \
  X(packets, kSum, kCount, "data packets (SYNC/FINISH not counted)")           \
  X(pages, kSum, kCount, "pages in data packets, zero pages included")         \
  X(payload_bytes, kSum, kCount, "page bytes that travelled")                  \
  X(header_bytes, kSum, kCount, "packet header bytes, of every packet")        \
  X(zero_pages, kSum, kCount,                                                  \
    "of `pages`, those that went as an offset alone")                          \
  X(untouched_pages, kSum, kCount,                                             \
    "pages in ZERO_RANGES packets (the source never touched them)")            \
  X(zero_range_packets, kSum, kCount, "ZERO_RANGES packets")                   \
  X(zero_pages_written, kSum, kCount,                                          \
    "destination: of zero_pages + untouched_pages, those it had to "           \
    "zero-fill (the rest already read as zero)")                               \
  X(compressed_packets, kSum, kCount,                                          \
    "packets whose payload was a zstd frame")                                  \
  X(compressed_input_bytes, kSum, kCount, "the page bytes those packets held") \
  X(compressed_output_bytes, kSum, kCount, "the frame bytes that travelled")   \
  X(compress_ns, kSum, kSeconds,                                               \
    "time spent compressing (source) or expanding (destination)")              \
  X(delta_pages, kSum, kCount,                                                 \
    "pages that travelled as delta records (SessionOptions::delta)")           \
  X(delta_record_bytes, kSum, kCount, "the bytes of those records")            \
  X(delta_ns, kSum, kSeconds,                                                  \
    "source: time spent refreshing copies and encoding deltas; "               \
    "destination: checking and applying them")                                 \
  X(delta_cache_hits, kSum, kCount,                                            \
    "source: re-sent pages whose last sent copy was cached")                   \
  X(delta_cache_misses, kSum, kCount,                                          \
    "source: re-sent pages that were not (they went whole and were cached)")   \
  X(delta_cache_evictions, kSum, kCount,                                       \
    "source: copies evicted to make room, the least recently sent first")      \
  X(sealed_bytes, kSum, kCount,                                                \
    "header and payload bytes sealed (source) or opened (destination) on a "   \
    "protected stream")                                                        \
  X(sealed_in_place_bytes, kSum, kCount,                                       \
    "source: payload bytes sealed where the pages are (frozen memory, "        \
    "Sender::NoteMemoryFrozen), without a staging copy")                       \
  X(file_bytes, kSum, kCount,                                                  \
    "payload bytes read from (source) or written to (destination) a "          \
    "region's file (Region::fd) instead of through its mapping")               \
  X(seal_ns, kSum, kSeconds,                                                   \
    "time spent sealing (source: copy or encrypt, and tag) or opening "        \
    "(destination: decrypt, and check the tag)")                               \
  X(syncs, kSum, kCount, "SYNC packets (round barriers)")                      \
  X(finishes, kSum, kCount, "FINISH packets (0 or 1)")                         \
  X(ring_max_occupancy, kMax, kCount,                                          \
    "most commands in the scheduler -> channel ring")                          \
  X(producer_wait_ns, kSum, kSeconds, "scheduler blocked on a full ring")      \
  X(producer_wait_max_ns, kMax, kSeconds,                                      \
    "the longest single wait on a full ring")                                  \
  X(consumer_idle_max_ns, kMax, kSeconds,                                      \
    "the longest the channel thread slept on an empty ring")                   \
  X(send_latency_p50_ns, kMax, kMicros,                                        \
    "per data packet, the time the transport took to accept it, including "    \
    "waiting for a header slot: approximate median")                           \
  X(send_latency_p99_ns, kMax, kMicros, "the same, 99th percentile")           \
  X(thread_cpu_ns, kSum, kSeconds,                                             \
    "CPU time of the channel's own thread (0 in single-thread mode)")          \
  X(lost, kSum, kCount,                                                        \
    "1 if the session went on without this channel "                           \
    "(SessionOptions::survive_channel_loss; SessionStats::channels_lost "      \
    "says when and why); in a Total(), how many channels were lost")

// What every transport counts (channels::TransportStats).
#define RAMFERRY_TRANSPORT_COUNTERS(X)                                   \
  X(send_calls, kSum, kCount, "sendmsg / SQEs / ibv_post_send calls")    \
  X(submit_calls, kSum, kCount, "syscalls that submitted them")          \
  X(short_sends, kSum, kCount, "sends the kernel took only part of")     \
  X(zc_sends, kSum, kCount, "sends that asked for zero copy")            \
  X(zc_completions, kSum, kCount, "of those, completions reaped")        \
  X(zc_copied, kSum, kCount, "completions the kernel flagged as copied") \
  X(zc_notifications, kSum, kCount, "notification messages read")        \
  X(enobufs_retries, kSum, kCount, "optmem/memlock pressure, retried")   \
  X(flushes, kSum, kCount, "waits for all completions")                  \
  X(completion_wait_ns, kSum, kSeconds,                                  \
    "time blocked waiting for completions")                              \
  X(max_slots_in_flight, kMax, kCount,                                   \
    "most header slots waiting for their send to complete")              \
  X(recv_calls, kSum, kCount,                                            \
    "receive calls (recvmsg; on rdma, ReadExact calls)")

// What only the rdma transport counts: its send queue and registration.
#define RAMFERRY_RDMA_COUNTERS(X)                                            \
  X(rdma_posts, kSum, kCount, "ibv_post_send calls")                         \
  X(rdma_wrs, kSum, kCount, "work requests posted")                          \
  X(rdma_outstanding_max, kMax, kCount, "peak work requests in flight")      \
  X(rdma_sq_full_hits, kSum, kCount, "posts that had to wait for room")      \
  X(rdma_drains_to_zero, kSum, kCount, "times nothing was left in flight")   \
  X(inline_sends, kSum, kCount, "SENDs that went IBV_SEND_INLINE")           \
  X(inline_max_bytes, kMax, kCount, "the largest of them")                   \
  X(inline_granted, kMax, kCount, "inline room the QP granted")              \
  X(register_round_trips, kSum, kCount, "REGISTER_REQUEST -> RESULT waits")  \
  X(register_batch_max, kMax, kCount, "most chunks in one request")          \
  X(chunks_registered, kSum, kCount,                                         \
    "chunks given a memory registration (by this channel, for the session)") \
  X(rdma_registered_bytes, kSum, kCount, "region bytes those pinned")        \
  X(rdma_register_ns, kSum, kSeconds, "time spent registering them")         \
  X(chunks_compressed, kSum, kCount, "zero chunks sent as COMPRESS")         \
  X(rdma_credit_waits, kSum, kCount,                                         \
    "posts that waited for the peer's receive credits")                      \
  X(rdma_credit_returns, kSum, kCount,                                       \
    "CREDITS messages (destination: sent; source: received)")

// Every counter of a ChannelStats, in the order of its fields.
#define RAMFERRY_CHANNEL_COUNTERS(X) \
  RAMFERRY_ENGINE_COUNTERS(X)        \
  RAMFERRY_TRANSPORT_COUNTERS(X)     \
  RAMFERRY_RDMA_COUNTERS(X)

#endif  // RAMFERRY_CHANNEL_COUNTERS_H_
