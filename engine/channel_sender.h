// One source channel: a thread that consumes its command ring and turns
// each command into exactly one packet on its transport. Pages leave from
// the region's memory, or, for long runs of a region with a file on a
// transport that copies them anyway, from a copy read through the file
// (engine/pages/region_file.h).
#ifndef RAMFERRY_ENGINE_CHANNEL_SENDER_H_
#define RAMFERRY_ENGINE_CHANNEL_SENDER_H_

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "base/counters.h"
#include "channels/transport.h"
#include "engine/channel_counters.h"
#include "engine/command_ring.h"
#include "engine/compress/compression_choice.h"
#include "engine/compress/compressor.h"
#include "engine/delta/delta_packer.h"
#include "engine/failure.h"
#include "engine/rate_limiter.h"
#include "engine/verify.h"
#include "proto/packet.h"
#include "proto/page_delta.h"
#include "proto/seal.h"
#include "ramferry/options.h"
#include "ramferry/region.h"
#include "ramferry/stats.h"

namespace ramferry::engine {

// The most page bytes a packet carries where a channel may copy its payload
// to seal it (a sealed session): the scheduler cuts batches at this bound
// (Scheduler's max_batch_bytes), so the staging buffers stay bounded,
// whatever the page size. A page larger than this cannot be sealed.
inline constexpr uint64_t kMaxStagedPayloadBytes = 8u << 20;
// A delta packet is built in a staging buffer too.
static_assert(proto::kMaxDeltaPayloadBytes <= kMaxStagedPayloadBytes);

class ChannelSender {
 public:
  // The consumer drains at most this many commands per pass and publishes
  // its ring tail once per pass.
  static constexpr uint32_t kMaxDrain = 128;

  // Runs on the channel's thread when its transport fails, before the
  // ring is aborted; the channel stops either way.
  using LossHandler = std::function<void(uint32_t, const absl::Status&)>;

  struct Config {
    uint32_t ring_entries = 256;
    uint32_t max_pages = 128;
    // Each header names the size of the next one (kFeatureNextHeaderSize).
    bool announce_next_header = false;
    // Where to record a digest of every page sent (null: nowhere).
    DigestTable* sent_digests = nullptr;
    // Set once the source's memory no longer changes (null: never): from
    // then on mac-sealed payloads are sealed where the pages are, and each
    // page sent is recorded in frozen_digests (null: nowhere).
    const std::atomic<bool>* memory_frozen = nullptr;
    FrozenDigests* frozen_digests = nullptr;
    // All-zero pages go as flagged offsets, without their bytes
    // (kFeatureZeroPages).
    bool zero_pages = false;
    // Payloads may go as zstd frames (kFeatureCompressedPages); ignored on a
    // transport with channels::kCapRemotePlacement.
    Compression compression = Compression::kOff;
    int compression_level = 1;
    // Shared by every channel of the session: each data packet waits
    // here for its bytes (null: no limit).
    RateLimiter* limiter = nullptr;
    // Non-null: kFeatureDeltaPages was negotiated, and pages re-sent after
    // round 0, of regions with the cache's page size, may go as deltas
    // against the copies in this cache (shared by every channel), as
    // `delta` says. `delta_allowed` (null: always) turns it off for good,
    // at post-copy's switch.
    DeltaCache* delta_cache = nullptr;
    Delta delta = Delta::kOff;
    const std::atomic<bool>* delta_allowed = nullptr;
    // The peer has an address of this host (loopback): its receive takes
    // the CPUs this channel encodes on, so Delta::kAuto judges a packet's
    // encoding at its whole wall time, cache fills included, and credits
    // no link with the time a send waited (the destination's CPU, not a
    // link, made it wait). Elsewhere a fill is left out of the encoder and
    // the link gets the time the packet took to prepare where its send
    // then waited (CompressionChoice).
    bool peer_on_this_host = false;
  };

  // A failure ends the session through `failure`, unless `on_loss` is set
  // (the session survives channel loss): then it goes there. `sealer`
  // (null: the stream is not sealed) seals every packet (proto/seal.h).
  ChannelSender(uint32_t index, std::unique_ptr<channels::Transport> transport,
                absl::Span<const Region> regions, const Config& config,
                SessionFailure* failure, LossHandler on_loss = nullptr,
                std::unique_ptr<proto::Sealer> sealer = nullptr);
  ~ChannelSender();

  CommandRing& ring() { return ring_; }
  channels::Transport& transport() { return *transport_; }

  // Threaded mode: a thread consumes the ring until FINISH or an abort.
  void Start();
  void Join();
  // Single-thread mode: executes whatever the ring holds now, on the
  // caller's thread (the producer's), and returns.
  absl::Status DrainInline();
  void ExportStats(ChannelStats* out) const;

 private:
  void Run();
  // Executes the first `n` ready commands, submits, releases them; true
  // once FINISH was executed. A failure is recorded and aborts the ring.
  absl::StatusOr<bool> ProcessBatch(uint32_t n);
  absl::Status Fail(const absl::Status& status);
  // `next`: the command after this one, where it is already queued.
  absl::Status Execute(const Command& command, const Command* next);
  // The header of a packet that names `command`'s region and words; takes
  // the next packet number.
  proto::PacketHeader RegionHeader(uint16_t flags, const Command& command,
                                   const Region& region,
                                   uint32_t next_header_bytes);
  absl::Status SendData(const Command& command, uint32_t next_header_bytes);
  // SendData's steps, on one packet: the pages to send (read through the
  // region's file, zero pages flagged) into iov_; the digests of what was
  // sent; the seal over the payload.
  struct OutgoingData;
  // Where a data packet's page digests are taken, decided once per packet
  // (DigestPointFor) from how its payload is built: from a copy the
  // channel made (before a seal may encrypt it), in the mac's pass over
  // frozen memory sealed in place, or after the send from the memory it
  // read.
  enum class DigestPoint { kFromCopy, kWhileSealing, kAfterSend };
  // SendData's steps, in order: the header's slot and fields; the payload
  // (gathered or delta-packed, compressed) and its DigestPoint; the header
  // encoded and the payload sealed; the rate limit and the send; the
  // choices' timings, the digests where taken after the send, counters.
  absl::Status BeginPacket(OutgoingData& packet, uint32_t next_header_bytes);
  absl::Status BuildPayload(OutgoingData& packet);
  DigestPoint DigestPointFor(const OutgoingData& packet) const;
  absl::Status Protect(OutgoingData& packet);
  absl::Status Transmit(OutgoingData& packet);
  void Account(const OutgoingData& packet);
  static uint64_t OutgoingBytes(const OutgoingData& packet);
  absl::Status GatherPages(OutgoingData& packet);
  // Whether command `c`'s pages go through the delta cache.
  bool UseDelta(const Command& c);
  // GatherPages for a packet that goes through the delta cache: the
  // payload (whole pages, then records) in a staging buffer.
  absl::Status PackDelta(OutgoingData& packet);
  template <typename Digests>
  void RecordSent(Digests* digests, const OutgoingData& packet, bool pages);
  void RecordSent(const OutgoingData& packet);
  absl::Status SealPayload(OutgoingData& packet);
  absl::Status SendZeroRanges(const Command& command,
                              uint32_t next_header_bytes);
  // The payload to send for `payload_bytes` bytes in iov_: a compressed
  // copy in a staging buffer (and its size), or nothing (0) to send iov_.
  absl::StatusOr<size_t> MaybeCompress(uint64_t payload_bytes);
  // The staging buffer next in turn, with room for `bytes`; waits for the
  // transport to release it where a zero-copy send may still read it.
  absl::StatusOr<uint8_t*> StagingBuffer(size_t bytes);
  // Sender::NoteMemoryFrozen was called (Config::memory_frozen).
  bool Frozen() const {
    return memory_frozen_ != nullptr &&
           memory_frozen_->load(std::memory_order_acquire);
  }
  // The buffer StagingBuffer gave now carries a packet.
  void UseStagingBuffer();
  // Seals a packet whose encoded header is `header`: its tag goes into the
  // header, and its payload (`payload`, none for a header-only packet)
  // into `out`, from which it is sent; with `out` null (mac over frozen
  // memory, or this channel's copy of the pages) the payload is sealed
  // where it is, and each piece is recorded in `digests` (null: not) for
  // region `region` while it is in cache, span i of `payload` holding the
  // pages from region offset run_offsets[i].
  absl::Status Seal(absl::Span<uint8_t> header, uint64_t packet_num,
                    absl::Span<const iovec> payload, uint8_t* out,
                    FrozenDigests* digests = nullptr, size_t region = 0,
                    absl::Span<const uint64_t> run_offsets = {});
  // A packet that is all header: sealed where the stream is.
  absl::Status SealHeader(absl::Span<uint8_t> header, uint64_t packet_num);
  // Flags the zero pages among `offsets` into wire_offsets_; returns how
  // many there were. The pages are read from `copy` (entry i at
  // copy + i * page_size) or, where it is null, from the region.
  uint32_t FlagZeroPages(const Region& region,
                         absl::Span<const uint64_t> offsets,
                         const uint8_t* copy);
  // Where `offsets` (a data command's, none flagged yet) go through the
  // region's file (engine/pages/region_file.h): reads their pages into a
  // staging buffer, back to back, and returns it; null where they go from
  // memory.
  absl::StatusOr<uint8_t*> ReadThroughFile(const Region& region,
                                           absl::Span<const uint64_t> offsets,
                                           bool frozen);
  // kStream, kStreamEnd: one STREAM or STREAM_END packet.
  absl::Status SendStream(const Command& command, uint32_t next_header_bytes);
  absl::Status SendMarker(uint16_t flags, uint64_t round,
                          uint32_t next_header_bytes);
  // What the header of `next` will take on the wire, when announced.
  uint32_t NextHeaderBytes(const Command* next) const;

  const uint32_t index_;
  std::unique_ptr<channels::Transport> transport_;
  absl::Span<const Region> regions_;
  CommandRing ring_;
  SessionFailure* const failure_;
  const LossHandler on_loss_;
  const bool announce_next_header_;
  DigestTable* const sent_digests_;
  const std::atomic<bool>* const memory_frozen_;
  FrozenDigests* const frozen_digests_;
  const bool zero_pages_;
  RateLimiter* const limiter_;
  std::thread thread_;

  uint64_t packet_num_ = 0;  // channel thread only
  std::vector<iovec> iov_;
  std::vector<uint64_t> run_offsets_;
  std::vector<uint64_t> wire_offsets_;  // offsets, zero pages flagged

  // Sealing (channel thread only): the payload goes from a staging copy.
  std::unique_ptr<proto::Sealer> sealer_;

  // Staging buffers, for compressed and sealed payloads (channel thread
  // only). A zero-copy transport may still read a staging buffer after
  // SendPacket returns: the buffers rotate, and the transport is flushed
  // before one is reused.
  static constexpr size_t kStagingBuffers = 4;
  // Sealing in place goes this many bytes at a time (at least a page), so
  // a piece's digest reads it from cache.
  static constexpr size_t kSealPieceBytes = 64 << 10;
  const Compression compression_;
  std::unique_ptr<PacketCompressor> compressor_;
  std::vector<std::vector<uint8_t>> staging_;
  size_t next_staging_ = 0;
  bool staging_wrapped_ = false;
  CompressionChoice choice_;  // kAuto: whether compressing pays, measured
  // Delta encoding (Config::delta_cache): the packer, and where the pages
  // a packet's digests read lie (the copies, not the payload).
  const Delta delta_;
  const std::atomic<bool>* const delta_allowed_;
  const bool peer_on_this_host_;
  std::unique_ptr<DeltaPacker> packer_;
  CompressionChoice delta_choice_{CompressionChoice::Rule::kNoSlower};
  std::vector<iovec> sent_runs_;
  std::vector<uint64_t> sent_offsets_;
  ChannelCounters counters_;
  base::LatencyHistogram send_latency_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_CHANNEL_SENDER_H_
