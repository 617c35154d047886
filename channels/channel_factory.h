// Opens data channels of every family behind one interface, so the engine
// opens and admits each channel the same way whatever carries it.
//
// The source dials every family with DialChannel. Socket families connect a
// stream socket and exchange the Hello over it (channels/socket_dial.h);
// families that own their connection set-up (kCapOwnsConnection) carry the
// Hello inside their own handshake. On the destination, socket channels
// arrive through the destination's one TCP listener
// (channels/socket_listener.h), whose socket OpenTcp reads; a family that owns
// its connection listens for itself (ListenForChannels).
#ifndef RAMFERRY_CHANNELS_CHANNEL_FACTORY_H_
#define RAMFERRY_CHANNELS_CHANNEL_FACTORY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "channels/transport.h"
#include "proto/handshake.h"
#include "proto/seal.h"

namespace ramferry::channels {

// The kind to run, once its probe has spoken: `kind` itself, or its
// fallback where the probe fails and `allow_fallback` (then `warning`
// says so). An error carries the probe's reason.
struct ResolvedTransport {
  TransportKind kind;
  std::string warning;
};
absl::StatusOr<ResolvedTransport> ResolveTransport(TransportKind kind,
                                                   bool allow_fallback);

// The send side of a socket family on connected stream socket `fd`, which
// it owns (closed on failure too). The receive side of every socket
// family is OpenTcp.
absl::StatusOr<std::unique_ptr<Transport>> OpenSocketChannel(
    TransportKind kind, int fd, const TransportOptions& options);

// What it takes to set up one channel.
struct ConnectSpec {
  std::string host;
  uint16_t port = 0;
  TransportOptions options;
  // The key the Hello proves (empty: none), every family its own way; and,
  // socket families, when the exchange must be over (a family that owns
  // its connection bounds it by connect_timeout).
  std::string auth_key;
  absl::Time deadline = absl::InfiniteFuture();
  // Negotiated session features (proto::kCap*), as far as the transport
  // acts on them (kCapChunkedRegistration: pin-all, batched requests).
  uint64_t session_capabilities = 0;
  uint64_t chunk_bytes = 0;  // kCapChunkedRegistration
  uint32_t max_inline = 0;   // kCapInlineSends: the room to ask for
  absl::Duration connect_timeout = absl::Seconds(10);
};

// Source: connects `hello`'s channel, the Hello carried the family's way
// (connect_timeout bounds the connect, spec.deadline the exchange); a
// refusal comes back as the status the destination gave.
struct DialedChannel {
  std::unique_ptr<Transport> transport;
  proto::HelloReply reply;
  // Socket families: the connected socket, owned by the transport; -1
  // otherwise.
  int socket_fd = -1;
  // Where the Hello proved a key: the connection's stream keys.
  std::optional<proto::SealKeys> keys;
};
absl::StatusOr<DialedChannel> DialChannel(TransportKind kind,
                                          const ConnectSpec& spec,
                                          const proto::Hello& hello);

// Destination: accepts channels of a family that owns its connection,
// each proving spec.auth_key where it is set. Each request's Hello goes to
// `admit`; an accepted one becomes a transport handed to `deliver` once
// established and proven, and every admitted Hello is delivered once: with
// its transport, or with why it has none (kUnauthenticated: its peer did
// not prove the key, so the channel is still the real source's to open;
// another error: it was lost on the way). With spec.auth_key set and a
// `preview` (which answers a Hello as `admit` would, taking nothing), a
// family that must answer a request before its proof (rdma: the accept
// carries the reply and the challenge) asks `preview` then, and `admit`
// only once the proof checked out; a request that never proves was never
// admitted, and is not delivered. Destroying the listener stops it.
class ChannelListener {
 public:
  using Admit = std::function<proto::HelloReply(const proto::Hello&)>;
  using Deliver = std::function<void(
      const proto::Hello&, absl::StatusOr<std::unique_ptr<Transport>>)>;
  virtual ~ChannelListener() = default;
  // Connection requests refused so far, and of those the ones that failed
  // authentication.
  virtual uint64_t refused() const = 0;
  virtual uint64_t auth_failures() const = 0;
};
absl::StatusOr<std::unique_ptr<ChannelListener>> ListenForChannels(
    TransportKind kind, const ConnectSpec& spec, ChannelListener::Admit admit,
    ChannelListener::Deliver deliver, ChannelListener::Admit preview = nullptr);

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_CHANNEL_FACTORY_H_
