// One destination channel: a thread that reads packets from its transport,
// validates every header field against the session before touching memory,
// and reads pages straight into place, or, for long runs of a region with a
// file (engine/pages/region_file.h), into a buffer of its own that it then
// writes to the file.
#ifndef RAMFERRY_ENGINE_CHANNEL_RECEIVER_H_
#define RAMFERRY_ENGINE_CHANNEL_RECEIVER_H_

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/counters.h"
#include "channels/transport.h"
#include "engine/channel_counters.h"
#include "engine/compress/compressor.h"
#include "engine/failure.h"
#include "engine/page_placer.h"
#include "engine/pages/landings.h"
#include "engine/region_table.h"
#include "engine/round_barrier.h"
#include "engine/stream/stream_sink.h"
#include "proto/packet.h"
#include "proto/seal.h"
#include "ramferry/stats.h"

namespace ramferry::engine {

class ChannelReceiver {
 public:
  // Why the receive thread stopped short of FINISH.
  struct Error {
    uint32_t channel;
    uint64_t round;  // the round the channel was in
    absl::Status status;
    // The connection failed (closed, reset, stalled): what a lost channel
    // looks like, as opposed to a peer that sent something invalid.
    bool connection_failed;
  };
  using ErrorHandler = std::function<void(const Error&)>;

  struct Config {
    uint32_t max_pages = 128;
    // Headers announce the size of the next one (kFeatureNextHeaderSize).
    bool next_header_size = false;
    // Payloads may come as zstd frames (kFeatureCompressedPages).
    bool compressed_pages = false;
    // What every page that lands is noted in (engine/pages/landings.h),
    // each table null where the session did not negotiate it:
    // - held: kFeatureDeltaPages; pages may come as delta records, applied
    //   to pages in this set (which every landing fills);
    // - zeros: kFeatureZeroPages; zero pages and ranges are applied
    //   through it;
    // - unauthentic: a sealed stream; where the pages of a payload read
    //   in place are kept while no tag vouched for them (null: nowhere; a
    //   test driving one channel, where a failed read ends everything);
    // - digests: where a digest of every page that lands is recorded.
    Landings::Tables landings;
    // Non-null: kFeaturePostcopy (the session's PostcopyTarget). Once it
    // is armed, every page goes into place through it (UFFDIO_COPY from a
    // staging copy), never by a write into the region, which would fault
    // on itself.
    PagePlacer* postcopy = nullptr;
    // Non-null: the session carries byte streams, and their packets go
    // here once authentic (engine/stream/stream_sink.h); null: a stream
    // packet is refused, as it is on a transport that places payloads
    // remotely (rdma reads no payload into a buffer).
    StreamSink* streams = nullptr;
  };

  // An error ends the session through `failure`, unless `on_error` is set:
  // then it goes there, on the receive thread, which stops. `opener`
  // (null: the stream is not sealed) checks every packet's tag
  // (proto/seal.h) before anything of the packet counts: a SYNC, FINISH or
  // ZERO_RANGES packet acts only once its tag checked out. A data payload
  // is read where it belongs and opened there, in cache: until its tag
  // checks out its pages are marked in Config::landings.unauthentic, and a
  // payload
  // that fails (a forged one, one cut mid-way) leaves them marked: never
  // digested, never counted, the round that carried it never confirmed.
  // The destination is not live before the switch, so a forged byte there
  // is harmless until the session ends or goes live, which the mark
  // forbids until an authentic copy lands. After post-copy's switch the
  // memory is live: payloads are opened in a staging copy and placed only
  // when authentic. A payload that goes through the region's file is read
  // into the same staging copy and written to the file only when
  // authentic, so it never lands forged or cut.
  ChannelReceiver(uint32_t index,
                  std::unique_ptr<channels::Transport> transport,
                  const RegionTable* regions, const Config& config,
                  RoundBarrier* barrier, SessionFailure* failure,
                  ErrorHandler on_error = nullptr,
                  std::unique_ptr<proto::Sealer> opener = nullptr);
  ~ChannelReceiver();

  channels::Transport& transport() { return *transport_; }
  void Start();
  void Join();
  // The channel read its FINISH packet.
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  // Blocks until the receive thread has returned (it read FINISH, failed,
  // or was stopped) or `deadline` passes; true if it returned. A waiter
  // sleeps until then rather than polling finished().
  bool AwaitStopped(absl::Time deadline) const {
    return stopped_.WaitForNotificationWithDeadline(deadline);
  }
  void ExportStats(ChannelStats* out) const;

  // Reads and applies one packet. Public so a test or fuzzer can drive the
  // state machine without a thread.
  enum class Step { kContinue, kFinished };
  absl::StatusOr<Step> ReceiveOne();

 private:
  void Run();
  // Reads the next header unless the previous payload read brought it.
  absl::StatusOr<proto::PacketHeader> NextHeader();
  // Finds the region a data or ZERO_RANGES header names and reads the rest
  // of the header (its page_count words) unless it is already here.
  absl::StatusOr<const Region*> ReadHeaderWords(const proto::PacketHeader& h);
  // A data packet in named steps: its header's words and offsets, the
  // plan, the payload read, the landing, the counters.
  absl::Status ReceiveData(const proto::PacketHeader& h);
  // How a data packet's pages go, decided before its payload is read.
  struct DataPlan {
    uint64_t page_bytes = 0;    // of its pages, as iov_ holds them
    bool placing = false;       // after post-copy's switch: placed whole
    bool through_file = false;  // staged, then written to the region's file
    bool in_place() const { return !placing && !through_file; }
  };
  // The header's page offsets, checked against `region`, into offsets_.
  absl::StatusOr<absl::Span<uint64_t>> DecodeOffsets(
      const proto::PacketHeader& h, const Region& region);
  // The plan for the packet whose runs iov_ holds; sets record_bytes_ and
  // refuses delta records past their bound or after the switch.
  absl::StatusOr<DataPlan> PlanData(const proto::PacketHeader& h,
                                    const Region& region,
                                    absl::Span<const uint64_t> offsets);
  // Lands a payload read whole and authentic: placed, written through the
  // file or noted where it was read, its deltas applied and its zero
  // pages made; returns how many pages were zero.
  absl::StatusOr<uint64_t> LandData(const proto::PacketHeader& h,
                                    const DataPlan& plan, size_t index,
                                    const Region& region,
                                    absl::Span<const uint64_t> offsets);
  absl::Status ReceiveZeroRanges(const proto::PacketHeader& h);
  // A STREAM or STREAM_END packet: its payload read (with the next
  // header), opened, and handed to the sink. Stream packets belong to no
  // round.
  absl::Status ReceiveStream(const proto::PacketHeader& h);
  // Makes the flagged entries of `offsets` zero; returns how many.
  absl::StatusOr<uint64_t> ApplyZeroPages(size_t index, const Region& region,
                                          absl::Span<const uint64_t> offsets);
  // Makes a run of pages zero (or places them, after post-copy's switch)
  // and counts them.
  absl::Status CountZeroed(size_t index, uint64_t first, uint64_t count);
  // Reads a compressed payload (and the next header) and expands it into
  // iov_, which holds `page_bytes`.
  absl::Status ReadCompressed(const proto::PacketHeader& h,
                              absl::Span<const iovec> payload,
                              uint64_t payload_bytes);
  absl::Status ConnectionError(absl::Status s);
  // Reads the payload of `h` (`page_bytes` of pages of `region`, table
  // index `index`) into iov_, with the next header, and opens it where
  // the stream is sealed. A payload read `in_place` that fails counts as
  // written (NoteUnfinished).
  absl::Status ReadPayload(const proto::PacketHeader& h, uint64_t page_bytes,
                           size_t index, const Region& region, bool in_place);
  // Applies the packet's records (read into records_) to the pages they
  // stand for, once all are checked, and notes them as landed.
  absl::Status ApplyDeltas(const proto::PacketHeader& h, size_t index,
                           const Region& region,
                           absl::Span<const uint64_t> entries);
  // Points iov_ at a staging copy instead of the region (the run starts
  // stay in run_offsets_), so every read path below fills the staging
  // copy; PlaceStaged (post-copy) or WriteRuns (the region's file) then
  // lands it.
  void StageRuns(uint64_t page_bytes);
  absl::Status PlaceStaged(size_t index, const Region& region);
  // A payload read in place (not placing) that was cut or did not check
  // out: its pages (iov_) count as written, and on a sealed stream are
  // marked unauthentic. On this thread, before the error is reported, so
  // before the source can know to re-send them.
  void NoteUnfinished(size_t index, const Region& region);
  // How much of the next header to read with a payload. On a sealed
  // stream only its fixed part: the size announced for the rest is trusted
  // only once the announcing packet's tag checked out, so a forged
  // announcement cannot make the read wait for bytes that never come (the
  // rest of the header is read after it, with its words).
  size_t HeaderAhead() const {
    return opener_ != nullptr ? proto::kPacketFixedBytes : header_next_;
  }
  // Sealed stream: starts opening the packet whose whole header (of
  // `header_bytes`) is in header_, setting its tag aside, before the
  // payload or the next header is read over it.
  void BeginOpen(const proto::PacketHeader& h, size_t header_bytes);
  // Ends it over the payload `body` as it arrived (decrypted in place with
  // kEncrypt) and checks the tag.
  absl::Status FinishOpen(const proto::PacketHeader& h,
                          absl::Span<const iovec> body);
  // Both, for a packet that is all header.
  absl::Status OpenHeaderOnly(const proto::PacketHeader& h);

  const uint32_t index_;
  std::unique_ptr<channels::Transport> transport_;
  const RegionTable* const regions_;
  const uint32_t max_pages_;
  const bool next_header_size_;
  ZeroPages* const zero_pages_;  // applies zero pages
  const bool compressed_pages_;
  HeldPages* const held_;
  // The packet's delta records, read aside (on first need), and the pages
  // they changed.
  std::vector<uint8_t> records_;
  uint64_t record_bytes_ = 0;   // of the packet being read
  std::vector<iovec> payload_;  // iov_, then the records
  std::vector<iovec> delta_runs_;
  std::vector<uint64_t> delta_offsets_;
  PagePlacer* const postcopy_;
  StreamSink* const streams_;
  // What every landing notes (held, zero, unauthentic, digests), from
  // the Config's tables.
  Landings landings_;
  // landings_.Epoch() before the packet being landed was read.
  uint64_t landing_epoch_ = 0;
  std::vector<uint8_t> placing_;  // StageRuns's, on first need
  std::unique_ptr<PacketDecompressor> decompressor_;  // on first need
  std::vector<uint8_t> staging_;                      // on first need
  const std::unique_ptr<proto::Sealer> opener_;
  proto::SealTag tag_{};  // of the packet being opened
  RoundBarrier* const barrier_;
  SessionFailure* const failure_;
  const ErrorHandler on_error_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
  absl::Notification stopped_;  // Run returned

  // Receive thread only.
  bool connection_failed_ = false;  // the last error came from the transport
  uint64_t next_packet_ = 0;
  uint64_t round_ = 0;
  uint64_t round_pages_ = 0;
  std::vector<uint8_t> stream_payload_;  // one STREAM packet's, on need
  // The next header: `header_ahead_` bytes of it are already in header_
  // (read with the previous payload); `header_next_` bytes are to be read
  // at the packet boundary (what the previous header announced, or the
  // fixed part alone).
  std::vector<uint8_t> header_;
  size_t header_ahead_ = 0;
  size_t current_bytes_ = 0;  // of the header being handled, in header_
  size_t header_next_ = proto::kPacketFixedBytes;
  std::vector<uint64_t> offsets_;
  std::vector<proto::ZeroRange> ranges_;
  std::vector<iovec> iov_;
  std::vector<uint64_t> run_offsets_;

  ChannelCounters counters_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_CHANNEL_RECEIVER_H_
