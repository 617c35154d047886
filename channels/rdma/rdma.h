// rdma: one RC queue pair per channel (verbs + librdmacm). Pages go by RDMA
// WRITE straight into the destination's region; the packet header follows as a
// SEND on the same QP, in the same ibv_post_send chain, so the destination sees
// the header only once the pages are placed. Headers that fit the inline room
// the QP GRANTED go IBV_SEND_INLINE; larger ones from registered header slots,
// released by the SEND's completion.
//
// Registration: pin-all (the destination registers whole regions and sends
// their keys) or on demand (default): chunks the source has not written
// before are registered by the destination in REGISTER_REQUEST /
// REGISTER_RESULT round trips over the QP, many chunks per request when
// both ends have REG_BATCH, one otherwise; a never-registered chunk that is
// all zero goes as a COMPRESS message instead (the destination zero-fills
// it). Packets queued during a batch are registered for together, then
// posted one chain each.
//
// Receive credits (kFeatureRdmaCredits; rdma/credits.h): the destination
// grants its receive queue when it starts reading and returns receives in
// batches as it posts them again; the source posts no SEND (header or
// control message) beyond them, so none meets an empty receive queue and
// a slow destination holds the source back instead of costing it RNR
// retries.
//
// The connection's private data carries the channel Hello (56 bytes, the
// rdmacm limit) and the HelloReply. With a pre-shared key the accept also
// carries the destination's challenge and the source's first SEND its
// proof; the destination delivers the channel, and sends it anything, only
// once that proof checked out (rdma/auth.h).
#ifndef RAMFERRY_CHANNELS_RDMA_RDMA_H_
#define RAMFERRY_CHANNELS_RDMA_RDMA_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "channels/transport.h"
#include "proto/handshake.h"

namespace ramferry::channels {

struct RdmaConfig {
  // Negotiated capability bits (proto::kFeatureRdmaPinAll /
  // kFeatureRdmaRegBatch).
  uint64_t capabilities = 0;
  uint64_t chunk_bytes = 1 << 20;
  // Inline room to ask for at QP creation; the provider may grant less.
  uint32_t max_inline = 512;
  uint32_t send_queue = 512;  // work requests
  uint32_t recv_queue = 256;  // receives kept posted: the peer's credits
  // Source: the whole connect. Destination, with a key: how long the
  // source's proof may take to arrive once the connection is established.
  absl::Duration connect_timeout = absl::Seconds(10);
};

// OK when this host has an RDMA device; otherwise an error that says so.
absl::Status ProbeRdma();

// The memory one RDMA channel registers for its own queues (receive and
// control buffers), with the default RdmaConfig and packet headers of
// `max_header_bytes`: what a memlock estimate adds per channel.
uint64_t RdmaChannelBufferBytes(uint64_t max_header_bytes);

// Source: connects to host:port with `hello` as private data, proving
// `key` where it is not empty (hello.auth is set to match). On success
// returns the transport, with *reply the destination's HelloReply; a
// refusal comes back as the status the destination gave, a destination
// that cannot prove the key as kUnauthenticated.
absl::StatusOr<std::unique_ptr<Transport>> ConnectRdma(
    const std::string& host, uint16_t port, proto::Hello hello,
    const TransportOptions& options, RdmaConfig config, absl::string_view key,
    proto::HelloReply* reply);

// Destination: accepts RDMA channels. Each connection request's Hello is
// decoded and put to `admit` (with `key`, only a Hello that asks to prove
// it); an accepted one becomes a transport handed to `deliver` once
// established and, with a key, once the source's proof checked out within
// config.connect_timeout. Every accepted Hello reaches `deliver` once: with
// its transport, or with why it has none: kUnauthenticated where the
// source did not prove the key (the channel's slot is the real source's
// still), another error where its set-up failed or its peer left before it
// was established.
class RdmaListener {
 public:
  using Admit = std::function<proto::HelloReply(const proto::Hello&)>;
  using Deliver = std::function<void(
      const proto::Hello&, absl::StatusOr<std::unique_ptr<Transport>>)>;

  // With `key` and a `preview` (see ListenForChannels), a request is
  // answered by `preview` and admitted only once its proof checked out.
  static absl::StatusOr<std::unique_ptr<RdmaListener>> Listen(
      const std::string& host, uint16_t port, const TransportOptions& options,
      const RdmaConfig& config, absl::string_view key, Admit admit,
      Deliver deliver, Admit preview = nullptr);
  ~RdmaListener();
  uint16_t port() const;
  // Connection requests refused (a bad Hello, admission's refusal, a
  // failed proof) and, of those, the ones that failed authentication.
  uint64_t refused() const;
  uint64_t auth_failures() const;

  class Impl;

 private:
  explicit RdmaListener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_RDMA_RDMA_H_
