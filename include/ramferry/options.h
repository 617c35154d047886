// Settings for a transfer session. Both ends take the same struct; each
// reads the fields that concern it.
#ifndef RAMFERRY_OPTIONS_H_
#define RAMFERRY_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ramferry/region.h"
#include "ramferry/transport.h"

namespace ramferry {

// How Sender::Verify checks the destination. Chosen when the session
// connects, because the modes that keep per-page digests (8 bytes per page
// on each end that keeps them) record them while pages move. The
// destination follows the source's choice.
enum class VerifyMode : uint8_t {
  // The destination records a digest of every page as it lands; Verify
  // hashes the source's memory on every core and compares. Proves the
  // destination holds what the source's memory holds now, page for page,
  // including a page written without being marked dirty (a write the
  // tracking missed). The destination never reads its memory again, so it
  // may already be running when Verify runs.
  kFull,
  // Both ends record a digest of every page as it leaves and as it lands;
  // Verify compares the two tables and reads no memory. Proves every
  // page's last sent copy landed intact and was not overwritten by a stale
  // one; not that the tracking missed no write.
  kSent,
  // Nothing is recorded; Verify hashes both ends' memory again, one pass
  // each, as the pages are requested. Costs nothing while pages move.
  kReread,
};
const char* VerifyModeName(VerifyMode mode);
// "full", "sent" or "reread".
absl::StatusOr<VerifyMode> ParseVerifyMode(absl::string_view text);

// Whether the source compresses packet payloads (zstd), for links slower
// than the compressor. A compressed payload is built in a staging buffer:
// its packet is still one write, but not zero-copy from the pages.
enum class Compression : uint8_t {
  kOff,
  // Every packet whose pages shrink.
  kOn,
  // Each channel measures its link (the bytes per second its sends take,
  // over its last few dozen packets), the compressor and how much the data
  // it sends shrinks (a sample packet every so often), and compresses
  // where that moves pages a quarter faster (the link times the ratio,
  // capped by the compressor), until it is no longer 5% faster: off on
  // fast links and on incompressible data
  // (engine/compress/compression_choice.h).
  kAuto,
};
const char* CompressionName(Compression compression);
// "off", "on" or "auto".
absl::StatusOr<Compression> ParseCompression(absl::string_view text);

// Whether the source sends re-sent pages as deltas against the copy it last
// sent (engine/delta/): a page a later round re-sends usually differs in a
// few bytes, which travel instead of the page. The copies live in a cache
// of SessionOptions::delta_cache_bytes, the least recently sent evicted;
// a page's first send fills it. Not on transports that place pages in the
// peer's memory (rdma): nothing there applies a delta.
enum class Delta : uint8_t {
  kOff,
  // Every page re-sent after the first round, where its delta is under
  // half a page.
  kOn,
  // Each channel measures its link, the CPU its sends take and what
  // encoding costs, and encodes while that keeps the link's speed to a
  // few percent:
  // on where the link is the bottleneck, off on a link as fast as the
  // encoding (the rule of engine/compress/compression_choice.h kNoSlower).
  kAuto,
};
const char* DeltaName(Delta delta);
// "off", "on" or "auto".
absl::StatusOr<Delta> ParseDelta(absl::string_view text);

// What guards the stream after each connection's handshake (proto/seal.h).
// The destination sets the least it accepts; the source asks for one, and
// the destination grants what was asked or refuses the session.
enum class Protection : uint8_t {
  // kMac where there is a key and the transport carries pages through the
  // receiver (not rdma, which places them itself: there the connections
  // are authenticated and the stream is not); kNone without a key.
  kAuto,
  // Connections authenticated (with a key); the stream after the
  // handshake carries no tag.
  kNone,
  // Every control message and data packet carries an AES-256-GCM tag
  // (GMAC) over its header and payload: nothing on the path can alter,
  // inject, replay, reorder or splice a message unnoticed. The source
  // sends each payload from a copy it tagged (a page the workload writes
  // meanwhile must not change under its tag), so pages no longer leave
  // zero-copy from their own memory.
  kMac,
  // As kMac, and every payload is encrypted (AES-256-GCM).
  kEncrypt,
};
const char* ProtectionName(Protection p);
// "auto", "none", "mac" or "encrypt".
absl::StatusOr<Protection> ParseProtection(absl::string_view text);

// An address a source's data channel dials.
struct Endpoint {
  std::string host;
  uint16_t port = 0;  // 0: the session's (SessionOptions::port)
};

struct SessionOptions {
  // Source: where to connect. Destination: where to listen (port 0 picks
  // a free port; Receiver::port() tells which).
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  // Source: where the data channels go, for a destination reached over
  // several links (several NICs): channel i dials
  // channel_endpoints[i % size()], so the channels spread evenly over
  // them. Empty: every channel dials host:port. The control connection
  // always dials host:port: the session ends if the link it crosses goes
  // down, where a link carrying only data channels may go with
  // survive_channel_loss. The destination takes channels on every address
  // it listens on (listening on 0.0.0.0 covers all of its links). Each
  // channel's endpoint is in its ChannelStats.
  std::vector<Endpoint> channel_endpoints;

  TransportKind transport = TransportKind::kTcp;
  // Parallel data channels, one thread and one connection each.
  uint32_t channels = 2;
  // Pages per packet: one header + up to this many pages in one send.
  uint32_t packet_pages = 128;
  // Zero-copy transports: header slots per channel. A slot is reused only
  // after the kernel released the send that carried it.
  uint32_t header_slots = 1024;
  CompletionPolicy completion = CompletionPolicy::kWrap;
  // uring-zc: send pages from io_uring registered buffers (the regions are
  // registered, and pinned, when the session connects).
  bool registered_buffers = false;
  // uring-zc on a kernel that cannot run it: fall back to tcp-zerocopy
  // (reported in Sender::warnings()) instead of failing.
  bool fallback_to_tcp_zerocopy = false;

  // rdma: the destination registers whole regions at setup (pin-all), or
  // chunks on demand (default), in batches where both ends offer it.
  bool rdma_pin_all = false;
  bool rdma_reg_batch = true;
  uint64_t rdma_chunk_bytes = 1 << 20;  // the on-demand registration unit
  uint32_t rdma_max_inline = 512;       // inline room to ask the QP for

  // Source: when a data channel dies mid-session and others live, re-send
  // its unconfirmed batches on the survivors and carry on (the destination
  // is told over the control connection and stops waiting for it);
  // SessionStats::channels_lost says which channel went, in which round.
  // The session still ends with an error when the last channel or the
  // control connection dies. Off: any dead channel ends the session.
  // Not on rdma (RDMA writes keep landing until the queue pair is torn
  // down, which this does not do), nor with single_thread. The destination
  // follows the source's choice.
  bool survive_channel_loss = false;

  VerifyMode verify = VerifyMode::kFull;
  // Headers announce the size of the next one, so the destination reads a
  // payload and the next header in one call (kFeatureNextHeaderSize). Off
  // speaks the older stream, as a peer without the capability does.
  bool announce_next_header = true;
  // All-zero pages travel as offsets alone (kFeatureZeroPages): the source's
  // channel threads test each page as they send it, and the destination
  // makes the page zero, writing nothing where it already reads as zero
  // (Region::reads_as_zero). Off on either end: every page's bytes travel.
  bool zero_pages = true;
  // Source, with zero_pages: the first round neither reads nor sends the
  // pages the kernel says were never touched (engine/untouched.h: no page
  // behind them, a tmpfs hole, the shared zero page); it sends their
  // ranges instead. Not with survive_channel_loss (the ranges are not
  // re-sent when their channel is lost, so that session sends them as
  // zero pages).
  bool skip_untouched = true;
  // Source: see Compression. The destination accepts compressed packets
  // whatever this says. Not on transports that place pages in the peer's
  // memory themselves (rdma), which send the pages as they are.
  Compression compression = Compression::kOff;
  int compression_level = 1;  // zstd's; negative is faster, 1..19 smaller
  // Source: see Delta. The destination accepts deltas whatever this says.
  // With compression too, the records are compressed with the pages.
  Delta delta = Delta::kOff;
  uint64_t delta_cache_bytes = uint64_t{256} << 20;

  // Source: no channel threads; the scheduler drives each channel itself
  // (the baseline the producer/consumer split is measured against).
  bool single_thread = false;
  // Commands queued per channel between the scheduler and the channel
  // thread (a power of two).
  uint32_t ring_entries = 256;

  // Post-copy (Sender::StartPostcopy): after the switch the destination
  // runs on while the pages it lacks fault and are fetched on demand.
  // Both ends must allow it (the destination refuses a source that asks
  // when its own is off); socket transports only (pages are placed through
  // userfaultfd, which rdma's remote writes bypass); the destination's
  // regions must be private anonymous memory of 4 KiB pages; not with
  // survive_channel_loss; verifies with VerifyMode::kFull only (the
  // destination's workload writes its memory before Verify).
  bool postcopy = false;

  // The session carries byte streams instead of pages (docs/streams.md):
  // both ends set it and register no regions. The source hands each
  // connection of its peer (QEMU's migration: main, then multifd) to
  // Sender::CarryStream; the destination connects a peer of its own for
  // each (Receiver::OnStreamOpen). Everything else a session has holds:
  // the handshake, protection, several links, the rate limit. Socket
  // transports only (tcp, tcp-zerocopy, uring-zc: rdma places bytes in
  // registered memory, and a stream has none); not with post-copy or
  // delta. With survive_channel_loss each stream's bytes are kept until
  // the destination acknowledges them, and a lost channel's streams go on
  // on a live one (Sender::AwaitStreams declares the loss).
  bool streams = false;
  // Post-copy: page requests and their answers go on a connection of their
  // own (the urgent channel, with a thread on each end), never queued
  // behind bulk pages. Off: requests ride the control connection and are
  // answered on the bulk channels, behind what is queued there (what QEMU
  // did before its preempt channel; kept to measure the difference).
  bool postcopy_urgent_channel = true;
  // Post-copy, destination: when the session fails after the switch and
  // before the last page (a lost connection, a dead source process aside),
  // the destination keeps its workload paused and waits this long for the
  // source to resume it (Sender::ResumePostcopy) before it gives up and
  // Serve() returns the error. 0: it gives up at once (its workload still
  // paused: see Receiver::ReleasePostcopy).
  absl::Duration postcopy_resume_timeout = absl::ZeroDuration();

  // Source: the most bytes per second all channels together put on the
  // wire (headers and payloads), so the session leaves the rest of a link
  // to other traffic; 0: as fast as the channels go. Sender::
  // SetMaxBandwidth changes it mid-session.
  uint64_t max_bandwidth = 0;

  // Source: keep retrying the control connection this long (the
  // destination may still be starting).
  absl::Duration connect_timeout = absl::Seconds(10);
  // Either end: a connection must complete its handshake in this long.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // Either end: a send or a read mid-packet that makes no progress this
  // long means the peer is stalled; the session ends with an error.
  absl::Duration stall_timeout = absl::Seconds(30);
  // Source: how long SendRound waits for the destination to confirm.
  absl::Duration round_timeout = absl::Minutes(10);

  // The pre-shared key (ReadAuthKeyFile) both ends must hold: every
  // connection then proves it with HMAC-SHA256 challenge-response before
  // it is admitted, and the source proves the destination holds it too.
  // Empty: no authentication, which each end refuses unless `insecure`
  // says so. Protection (below) says what guards the stream after the
  // handshake.
  std::string auth_key;
  // Run without a key: any host that reaches the destination's port can
  // connect and write its memory, and a source may be sending its memory
  // to an impostor. Only for a trusted network or a test; without it, an
  // end with no key refuses to start.
  bool insecure = false;
  // See Protection. The destination refuses a source that asks for less
  // than its own setting (kAuto counts as what it resolves to).
  Protection protect = Protection::kAuto;

  // Destination: the most channels and pages per packet it accepts.
  uint32_t max_channels = 64;
  uint32_t max_packet_pages = 1024;
};

// Checks ranges and combinations; the error names the field.
absl::Status ValidateOptions(const SessionOptions& options);

// Sets the field named `name` ("packet-pages" or "packet_pages") from its
// text form, for a caller that has options as text (a binding, a config
// file): the numbers in the range ValidateOptions checks, the bools as
// 1/0, true/false or on/off, the "-ms" timeouts in milliseconds, the
// named choices (completion, delta) by name, channel-endpoints as
// "HOST:PORT,...". A refused value is INVALID_ARGUMENT and leaves
// `options` as they were; an unknown name is NOT_FOUND, and its message
// lists every name. Fields of their own types (host, port, transport, the
// key, the regions' policies) are set as themselves.
absl::Status SetOption(SessionOptions& options, absl::string_view name,
                       absl::string_view value);

// ValidateOptions, and what the options ask of the regions: none for a
// session of streams; post-copy places 4 KiB pages only; a protected
// stream seals pages no larger than its staging bound. (Each region's own
// shape, and at least one, is checked where the session starts.)
// Sender::Connect and Receiver::Listen run it before anything else, so a
// session that cannot run is refused before a connection is made.
absl::Status ValidateSession(const SessionOptions& options,
                             absl::Span<const Region> regions);

// What guards the stream of a session with `options`: options.protect
// with kAuto resolved (kNone, kMac or kEncrypt).
Protection ResolvedProtection(const SessionOptions& options);

// Whether `kind`'s channels can prove a pre-shared key (auth_key).
bool TransportAuthenticates(TransportKind kind);

}  // namespace ramferry

#endif  // RAMFERRY_OPTIONS_H_
