// The narrow interface every transport implements. A transport owns one
// connection (a socket or a queue pair) and its completions; it moves
// packets (a header the caller filled + payload spans) and knows nothing of
// rounds, bitmaps or scheduling.
//
// Threading: one thread sends, one thread receives (for a given object,
// usually only one of the two is used); Shutdown() and stats() are safe
// from any thread.
#ifndef RAMFERRY_CHANNELS_TRANSPORT_H_
#define RAMFERRY_CHANNELS_TRANSPORT_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/counters.h"
#include "base/status_macros.h"
#include "ramferry/channel_counters.h"
#include "ramferry/stats.h"
#include "ramferry/transport.h"

namespace ramferry::channels {

// What a transport promises; the conformance suite checks each promise.
enum TransportCapability : uint32_t {
  // Payload leaves from caller memory without a user-space copy.
  kCapZeroCopy = 1u << 0,
  // Headers rotate through slots released only by send completions.
  kCapHeaderSlots = 1u << 1,
  // Honours every CompletionPolicy.
  kCapCompletionPolicies = 1u << 2,
  // Payload memory can be registered with the transport up front.
  kCapRegisteredBuffers = 1u << 3,
  // Small control sends go inline in the work request.
  kCapInlineSends = 1u << 4,
  // Several queued packets can share one submission syscall.
  kCapBatchedSubmit = 1u << 5,
  // Payload lands in the peer's memory at payload_offsets by the transport
  // itself (RDMA WRITE): it must be the pages as they are, never a
  // transformed copy of them.
  kCapRemotePlacement = 1u << 6,
  // Dials and listens for itself, with the channel Hello carried in its own
  // connection set-up (rdma: the CM private data). Other transports run on
  // a stream socket the engine connected and exchanged the Hello over.
  kCapOwnsConnection = 1u << 7,
  // Its channels prove a session key (proto/auth.h) before the destination
  // delivers them: on a socket before admission, on rdma between its
  // accept and its first SEND (rdma/auth.h), before any key is sent.
  kCapAuthenticatedHello = 1u << 8,
  // Keeps user pages pinned while sends are in flight, so RLIMIT_MEMLOCK
  // and the kernel's notification memory bound how much it may have out.
  kCapPinsSendMemory = 1u << 9,
  // Region memory is registered with the peer in chunks whose size the
  // Hello negotiates, eagerly (pin-all) or on demand (batched requests).
  kCapChunkedRegistration = 1u << 10,
};

struct TransportOptions {
  // The biggest header the caller will write into AcquireHeader().
  size_t max_header_bytes = 0;
  uint32_t header_slots = 1024;
  CompletionPolicy completion = CompletionPolicy::kWrap;
  absl::Duration stall_timeout = absl::Seconds(30);
  // Send payload from buffers registered up front (RegisterRegion), where
  // the transport can (kCapRegisteredBuffers).
  bool registered_buffers = false;
};

struct OutgoingPacket {
  size_t header_bytes = 0;  // bytes filled in the AcquireHeader() buffer
  uint32_t region_id = 0;
  // Payload in local memory; contiguous pages already coalesced.
  absl::Span<const iovec> payload;
  // Byte offset in the region of each payload span (transports that place
  // data remotely, like RDMA, or send from registered buffers need it;
  // socket transports ignore it). Empty when the payload is not region
  // memory (a sealed or compressed copy in a buffer of the sender's): a
  // transport sends such a payload from where it lies.
  absl::Span<const uint64_t> payload_offsets;
};

// Counters a transport keeps (ramferry/channel_counters.h says what each
// counts); exported into the public ChannelStats.
struct TransportStats {
#define RAMFERRY_TRANSPORT_FIELD(field, merge, json, doc) base::Counter field;
  RAMFERRY_TRANSPORT_COUNTERS(RAMFERRY_TRANSPORT_FIELD)
  // Only the rdma transport counts these.
  RAMFERRY_RDMA_COUNTERS(RAMFERRY_TRANSPORT_FIELD)
#undef RAMFERRY_TRANSPORT_FIELD
  void ExportTo(ChannelStats* out) const;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual TransportKind kind() const = 0;
  virtual uint32_t capabilities() const = 0;

  // --- send side ---
  // A buffer of options.max_header_bytes for the next packet's header. It
  // stays untouched by the transport until the send that carries it has
  // completed; getting it may wait for completions, as the policy says.
  virtual absl::StatusOr<absl::Span<uint8_t>> AcquireHeader() = 0;
  // Sends header + payload as one packet (one send call unless the kernel
  // takes it in parts). Payload memory must stay valid and unchanged until
  // a later Flush() returns.
  virtual absl::Status SendPacket(const OutgoingPacket& packet) = 0;
  // Returns once every packet sent so far has completed: zero-copy buffers
  // are released and may be rewritten.
  virtual absl::Status Flush() = 0;
  // Pushes out packets SendPacket queued. Transports that batch several
  // packets per submission syscall send nothing until this (or Flush);
  // the caller calls it at the end of each batch of work.
  virtual absl::Status Submit() { return absl::OkStatus(); }
  // Reaps whatever completions are ready without blocking, and checks that
  // what was sent is being taken by the peer: fails (DEADLINE_EXCEEDED)
  // where the transport can tell that bytes it sent have waited
  // stall_timeout with nothing sent since (channels/delivery_watch.h).
  // Called when the sender has nothing else to do, and again at least
  // every idle_poll_interval() while it stays so: with no send blocked,
  // nothing else notices a link that died under a round's last packets.
  virtual absl::Status Poll() { return absl::OkStatus(); }
  virtual absl::Duration idle_poll_interval() const {
    return absl::InfiniteDuration();
  }
  // Registers caller memory that payload will come from, before any send
  // (transports with kCapRegisteredBuffers; others accept and ignore it).
  virtual absl::Status RegisterRegion(uint32_t /*region_id*/, void* /*base*/,
                                      uint64_t /*length*/) {
    return absl::OkStatus();
  }

  // --- receive side ---
  // Reads exactly buf.size() bytes. At a packet boundary the peer may be
  // idle indefinitely; mid-packet, stall_timeout without progress fails.
  virtual absl::Status ReadExact(absl::Span<uint8_t> buf,
                                 bool at_packet_boundary) = 0;
  // Reads the payload announced by the header just read into `dst`.
  virtual absl::Status ReadPayload(absl::Span<const iovec> dst) = 0;
  // Reads the payload into `dst`, then the first next_header.size() bytes
  // of the packet after it; the peer may pause between the two as at any
  // packet boundary. Stream transports do both in one call; the default
  // does them one after the other.
  virtual absl::Status ReadPayloadAndHeader(absl::Span<const iovec> dst,
                                            absl::Span<uint8_t> next_header) {
    RAMFERRY_RETURN_IF_ERROR(ReadPayload(dst));
    return ReadExact(next_header, /*at_packet_boundary=*/true);
  }

  // --- any thread ---
  // Makes blocked calls return; the transport is unusable afterwards.
  virtual void Shutdown() = 0;
  const TransportStats& stats() const { return stats_; }

 protected:
  TransportStats stats_;
};

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_TRANSPORT_H_
