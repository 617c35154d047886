// Sealing of the stream after the handshake: every control frame and every
// data packet carries an AES-256-GCM tag, so nothing on the path can
// inject, alter, replay, reorder, drop-and-resume or splice a message of an
// admitted connection unnoticed.
//
// Keys. Each authenticated connection derives its own keys with
// HKDF-SHA256 from the pre-shared key, salted with the destination's fresh
// nonce (its AuthChallenge) and bound to the whole Hello as it went on the
// wire (the source's fresh session id, the channel index, the requested
// seal mode): one key and one 4-byte nonce salt per direction. Two
// connections never share a key, so a message spliced from another
// channel or another session fails its tag. The schedule needs nothing
// the handshake does not already have, and yields a plain AES-256-GCM key
// and salt per direction, which is what kTLS takes should it be used.
//
// Nonces. The 96-bit GCM nonce is the direction's salt followed by the
// message's 64-bit sequence number, big-endian: a data packet's
// packet_num, a control frame's count in its direction, both from 0. The
// receiver uses the number it expects, never the one on the wire, so a
// replayed, reordered or dropped message fails its tag. A number is never
// used twice under one key: each direction numbers its own messages.
//
// Modes. kEncrypt: the body (a packet's payload, a frame's payload) is
// encrypted and the header is authenticated; kMac: nothing is encrypted,
// header and body are both authenticated (GMAC). The tag is 16 bytes.
#ifndef RAMFERRY_PROTO_SEAL_H_
#define RAMFERRY_PROTO_SEAL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/auth.h"
#include "proto/crypto/aes_ctr.h"
#include "proto/crypto/ghash.h"

namespace ramferry::proto {

inline constexpr size_t kSealKeyBytes = 32;
inline constexpr size_t kSealSaltBytes = 4;
inline constexpr size_t kSealTagBytes = 16;

enum class SealMode : uint8_t { kNone, kMac, kEncrypt };
const char* SealModeName(SealMode mode);

// The Hello capability bit that asks for `mode` (0 for kNone), and the
// mode a Hello's capabilities ask for (an error when both bits are set).
uint64_t SealFeature(SealMode mode);
absl::StatusOr<SealMode> SealModeOf(uint64_t capabilities);

// One direction's secret.
struct SealKey {
  std::array<uint8_t, kSealKeyBytes> key{};
  std::array<uint8_t, kSealSaltBytes> salt{};
};

// Both directions of one connection.
struct SealKeys {
  SealKey to_destination;
  SealKey to_source;
};

// HKDF-SHA256(ikm = psk, salt = nonce, info = label || hello || reply),
// where `hello` is the Hello and `reply` the HelloReply as they went on
// the wire and `nonce` the destination's challenge nonce. The reply is in
// the key schedule because nothing else authenticates it (the proofs come
// before it): a reply altered on the way (a granted feature stripped or
// added) gives the two ends different keys, and the first sealed frame
// fails.
absl::StatusOr<SealKeys> DeriveSealKeys(absl::string_view psk,
                                        absl::Span<const uint8_t> hello,
                                        absl::Span<const uint8_t> reply,
                                        const AuthNonce& nonce);

using SealTag = std::array<uint8_t, kSealTagBytes>;

// One direction of one connection: seals (the sender) or opens (the
// receiver) one message at a time. A message is Begin, any number of
// Associate calls (header bytes: authenticated, never encrypted), then
// its body in any number of pieces (SealBody / OpenBody), then the tag.
// Associate must not follow a body piece within a message.
//
// Not thread-safe: one per direction and thread.
class Sealer {
 public:
  // Which end of the direction this object is: it only seals, or only
  // opens.
  enum class Use { kSeal, kOpen };
  // `mode` kMac or kEncrypt.
  static absl::StatusOr<std::unique_ptr<Sealer>> Create(SealMode mode,
                                                        const SealKey& key,
                                                        Use use);
  ~Sealer();
  Sealer(const Sealer&) = delete;
  Sealer& operator=(const Sealer&) = delete;

  SealMode mode() const { return mode_; }

  // Starts message `sequence` (its nonce).
  void Begin(uint64_t sequence);
  void Associate(absl::Span<const uint8_t> data);
  // Sender: `n` body bytes from `in` to `out` (encrypted with kEncrypt,
  // copied with kMac; `in` == `out` is allowed and copies nothing).
  void SealBody(const uint8_t* in, uint8_t* out, size_t n);
  // Receiver: `n` body bytes in place (decrypted with kEncrypt).
  void OpenBody(uint8_t* data, size_t n);
  // Sender: the message's tag. An error only where the library failed.
  absl::StatusOr<SealTag> FinishSeal();
  // Receiver: whether `tag` is the message's (compared in constant time).
  bool FinishOpen(const SealTag& tag);

 private:
  // Either `ctx` (OpenSSL's GCM) or, where the CPU has them, `aes` and
  // `ghash`: GCM from its parts (Create picks).
  Sealer(SealMode mode, const SealKey& key, void* ctx,
         std::unique_ptr<AesCtr> aes, std::unique_ptr<Ghash> ghash);
  // Runs body bytes through OpenSSL's cipher (kEncrypt).
  void Cipher(const uint8_t* in, uint8_t* out, size_t n);
  // kEncrypt on the parts: GHASH over ciphertext, after the header's.
  void HashCiphertext(const uint8_t* data, size_t n);

  const SealMode mode_;
  const SealKey key_;
  void* const ctx_;  // EVP_CIPHER_CTX, kept out of this header; or null
  const std::unique_ptr<AesCtr> aes_;
  const std::unique_ptr<Ghash> ghash_;
  AesCtr::Block mask_{};     // AES_K(J0) of the message, with aes_
  bool ciphertext_ = false;  // the message's body began, with aes_
  bool failed_ = false;      // an OpenSSL call failed within this message
};

}  // namespace ramferry::proto

#endif  // RAMFERRY_PROTO_SEAL_H_
