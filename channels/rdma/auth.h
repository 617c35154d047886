// rdma_auth: the pre-shared-key exchange of proto/auth.h on an RDMA
// channel, whose connection manager carries too little private data for
// the four messages a socket channel exchanges. What goes where:
//
//   connect request  source -> destination  Hello (56 bytes: all a REQ's
//                                           private data holds beside
//                                           rdmacm's own header)
//   accept           destination -> source  HelloReply (128 bytes), then,
//                                           where the Hello asked for
//                                           authentication, AuthChallenge
//                                           (64): 192 of the 196 bytes an
//                                           IB CM REP carries
//   first SEND       source -> destination  AuthProof (48 bytes)
//
// Both proofs are proto::ComputeAuthMac over the Hello bytes as they
// crossed the wire and the destination's fresh nonce, as on a socket; the
// source checks the destination's before it sends anything. Until the
// source's proof checks out the destination sends nothing on the queue
// pair (no region key, no REGISTER_RESULT, no receive credits), its queue
// pair takes no RDMA WRITE, and the listener does not deliver the channel,
// so nothing of the session's memory is registered for it; a wrong or
// missing proof revokes the queue pair (to error) and frees the channel's
// slot.
//
// No verbs here: the encodings and checks are tested without a device.
#ifndef RAMFERRY_CHANNELS_RDMA_AUTH_H_
#define RAMFERRY_CHANNELS_RDMA_AUTH_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/auth.h"
#include "proto/handshake.h"

namespace ramferry::channels {

// The private data an IB CM REP carries (rdma_accept on an RC queue pair;
// RoCE uses the IB CM too): rdmacm adds no header of its own to it.
inline constexpr size_t kRdmaAcceptPrivateDataMax = 196;
inline constexpr size_t kRdmaKeyedAcceptBytes =
    proto::kHelloReplyBytes + proto::kAuthChallengeBytes;
static_assert(kRdmaKeyedAcceptBytes <= kRdmaAcceptPrivateDataMax,
              "the keyed accept must fit one CM REP");

// What the destination's accept carries.
struct RdmaAccept {
  proto::HelloReply reply;
  // Where the source's Hello asked to be authenticated.
  std::optional<proto::AuthChallenge> challenge;
};

// The accept's private data: the reply, then the challenge where there
// is one (kRdmaKeyedAcceptBytes in all; kHelloReplyBytes without).
std::vector<uint8_t> EncodeRdmaAccept(const RdmaAccept& accept);
// The CM hands the source the whole fixed-size REP private data, zero
// padded: a challenge is there exactly where its magic is.
absl::StatusOr<RdmaAccept> DecodeRdmaAccept(absl::Span<const uint8_t> in);

// Destination, at a connect request: OK where the Hello's auth field
// (kAuthNone / kAuthHmacSha256) matches whether this end has a key;
// otherwise the refusal (kUnauthenticated) to send back, saying how to
// fix it.
absl::Status CheckHelloAuth(bool keyed, uint16_t auth);

// Destination: a challenge for `hello` (its wire bytes) with a fresh
// nonce, and the proof the source must answer it with.
struct RdmaSourceChallenge {
  proto::AuthChallenge challenge;
  proto::AuthMac expected;
};
RdmaSourceChallenge ChallengeSource(absl::string_view key,
                                    absl::Span<const uint8_t> hello);

// Source, on the accept: OK where it is as `key` requires (a challenge
// exactly where the source has a key) and the destination's proof
// checks out; otherwise kUnauthenticated, saying why. Nothing may be sent
// before this is OK.
absl::Status CheckDestination(absl::string_view key,
                              absl::Span<const uint8_t> hello,
                              const RdmaAccept& accept);

// Source: the first SEND of a keyed channel, the answer to `challenge`.
std::array<uint8_t, proto::kAuthProofBytes> SourceProof(
    absl::string_view key, absl::Span<const uint8_t> hello,
    const proto::AuthChallenge& challenge);

// Destination: OK where `message`, the source's first on the queue pair,
// is an AuthProof of exactly `expected` (compared in constant time);
// otherwise kUnauthenticated "authentication failed: ...".
absl::Status CheckSourceProof(absl::Span<const uint8_t> message,
                              const proto::AuthMac& expected);

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_RDMA_AUTH_H_
