// A man in the middle on loopback, for the tests: a TCP relay that forwards
// every connection it accepts to a real destination, parses the source's
// side of each stream (Hello, authentication, then data packets or control
// frames) and, when armed, tampers with it on a live, admitted connection:
// flips bits, forges, replays, drops, reorders, splices or truncates
// packets, or floods the control connection.
//
// The source connects to port() instead of the destination's port. The
// relay records what it did, so a test can assert that an attack really
// fired (one that never fired must fail the test, not pass it).
#ifndef RAMFERRY_TESTS_SUPPORT_ATTACK_RELAY_H_
#define RAMFERRY_TESTS_SUPPORT_ATTACK_RELAY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"

namespace ramferry::testing {

// Hello capability bits that say every control frame carries a 16-byte
// tag after its payload (SessionOptions::protect: mac, encrypt).
inline constexpr uint64_t kSealedFeatureBits = (1ull << 9) | (1ull << 10);
inline constexpr size_t kControlTagBytes = 16;

enum class AttackKind {
  kNone,
  // Flips bit `bit` of byte `byte` of a packet's 64-byte fixed header.
  kFlipHeader,
  // Flips one bit of next_header_bytes in the last data packet before a
  // SYNC, so that it announces 8 bytes more than the SYNC has (every data
  // packet waits in the relay for the one after it).
  kFlipNextHeader,
  // Flips one bit of a page offset: by default (offset_bit -1) in the
  // first entry that then names another page of the same packet, so the
  // page lands on one the same destination thread writes (no other channel
  // races it there); with offset_bit >= 0, that bit of the first entry.
  kFlipOffset,
  // Flips bit `bit` of the middle byte of a packet's payload.
  kFlipPayload,
  // Replaces a packet's payload with bytes the attacker made up (every
  // byte xor 0xa5), under the real header.
  kForge,
  // Inserts a made-up packet (a copy of the real header, made-up payload)
  // ahead of the real one.
  kForgeInsert,
  // Forwards a packet, then the one before it again.
  kReplay,
  // Swallows a packet; the stream resumes with the next.
  kDrop,
  // Holds a packet back and forwards it after the next one.
  kReorder,
  // In place of a packet, one captured on another data channel of the same
  // session (one announcing the same next header size, at the same index
  // if there is one).
  kSpliceChannel,
  // In place of a packet, one captured on the same channel of another
  // session through this relay (chosen as for kSpliceChannel).
  kSpliceSession,
  // Forwards half of a packet, then closes both sides of the connection.
  kTruncate,
  // A packet whose offsets are rewritten to name pages from
  // Attack::forged_base on (pages the real packet does not carry), its
  // payload made up (as kForge); half of it is forwarded, then both sides
  // are closed: the tag is never read. What a lost link looks like, with
  // the forged bytes already in place.
  kForgeTruncate,
  // Control connection, after a frame: `count` well-formed HEARTBEAT
  // frames (each with a garbage tag in a sealed session).
  kFloodHeartbeats,
  // Control connection, after a frame: `count` * 24 random bytes.
  kFloodRandom,
  // Control connection: a frame of the source's, then the same again.
  kReplayFrame,
  // Control connection, destination to source: a ROUND_DONE for round
  // `at_round` (with the page count the source sent), written once the
  // source has sent all of that round but for the last channel's SYNC,
  // which the relay holds back a while: the destination cannot have
  // applied the round yet. A garbage tag when sealed.
  kForgeRoundDone,
  // Control connection: when a frame of type `frame_type` comes (from the
  // source, or with `downstream` from the destination), cuts the
  // connection, both ways, before that frame goes on or, with `forward`,
  // right after it: a link lost at that step of the protocol.
  kCutAtFrame,
  // Control connection, destination to source: when the destination's
  // frame of type `frame_type` comes, an ERROR frame the relay made up
  // (CANCELLED, "forged by the relay"; a garbage tag when sealed) goes to
  // the source just before it: a refusal the destination never sent.
  kForgeErrorAtFrame,
  // Clears `strip` (capability bits) from the HelloReply of the control
  // connection on its way to the source: a granted feature taken away
  // (review A4), which nothing but the key schedule authenticates.
  kStripGranted,
};
const char* AttackKindName(AttackKind kind);

struct Attack {
  AttackKind kind = AttackKind::kNone;
  // Which connection: the control connection, or data channel `channel`,
  // or with `any_channel` whichever data channel first carries a packet
  // that suits the attack (RelayEvent::channel says which): for an attack
  // that needs a packet of some shape, which the scheduler may give to
  // either channel.
  bool control = false;
  uint32_t channel = 0;
  bool any_channel = false;
  // Fires at the first packet (or control frame) of that connection that
  // suits the attack (a data packet with pages for offsets and payloads,
  // one with a predecessor for a replay, a donor at hand for a splice),
  // whose index on the connection (0: the first after admission) is at
  // least `at_index` and, for a packet, whose round is at least `at_round`.
  uint64_t at_index = 0;
  uint64_t at_round = 0;
  // kFlipHeader: which byte of the fixed header and which bit (0 = lsb).
  size_t byte = 31;  // the low byte of the round
  int bit = 0;
  // kFlipOffset: which bit of the first entry; -1: see kFlipOffset.
  int offset_bit = -1;
  // kForgeTruncate: the byte offset of the first page the forged header
  // names (the rest follow it).
  uint64_t forged_base = 0;
  // kFloodHeartbeats / kFloodRandom.
  int count = 2000;
  // kStripGranted.
  uint64_t strip = 0;
  // kCutAtFrame, kForgeErrorAtFrame.
  uint32_t frame_type = 0;
  bool downstream = false;
  bool forward = false;
  // kReplay, kDrop, kReorder: rewrite packet numbers so that the stream
  // still counts 0, 1, 2... (the replayed packet takes the next number and
  // the later ones follow; after a drop the later ones close the gap; two
  // reordered packets swap numbers), so that only a tag can tell.
  bool renumber = false;
};

// One thing the relay did to a stream.
struct RelayEvent {
  AttackKind kind = AttackKind::kNone;
  std::string session;  // hex
  bool control = false;
  uint32_t channel = 0;
  uint64_t index = 0;  // packet (or frame) index on the connection
  uint64_t round = 0;
  std::string what;
  absl::Time when;  // just before the tampered bytes went on
  // kForge: the first made-up page and the region offset it names, to look
  // for at the destination afterwards.
  std::vector<uint8_t> forged_page;
  uint64_t forged_offset = 0;
};

// What the relay parsed on one connection, source to destination.
struct RelayConnection {
  std::string session;  // hex of the Hello's session id
  bool control = false;
  uint32_t channel = 0;
  bool authenticated = false;  // an AuthChallenge/AuthProof exchange
  bool admitted = false;       // the HelloReply accepted it
  bool sealed = false;         // control frames carry tags
  uint64_t granted = 0;        // capabilities in the HelloReply
  uint64_t packets = 0;        // data connection: packets of every kind
  uint64_t data_packets = 0;   // of them, with pages
  uint64_t syncs = 0;
  uint64_t finishes = 0;
  uint64_t zero_ranges = 0;
  uint64_t pages = 0;          // page offsets in data packets
  uint64_t frames = 0;         // control connection
  uint64_t bytes_up = 0;       // source -> destination, as received
  uint64_t bytes_down = 0;     // destination -> source
  std::string parse_error;     // empty while the stream parsed
  bool ended_cleanly = false;  // the source closed at a unit boundary
};

class AttackRelay {
 public:
  // Listens on 127.0.0.1 at a free port and forwards every connection to
  // 127.0.0.1:`destination_port`. `sealed` overrides what the HelloReply's
  // capabilities say about control-frame tags.
  explicit AttackRelay(uint16_t destination_port,
                       std::optional<bool> sealed = std::nullopt);
  ~AttackRelay();
  AttackRelay(const AttackRelay&) = delete;
  AttackRelay& operator=(const AttackRelay&) = delete;

  uint16_t port() const { return port_; }
  // Connections accepted from now on go to 127.0.0.1:`destination_port`
  // (a destination serves one session; the next one listens elsewhere).
  void Retarget(uint16_t destination_port);

  // How many data packets of each connection (the first) the relay keeps
  // for splicing elsewhere; 32 unless told.
  void KeepPackets(uint64_t first);

  // Arms `attack` for the connections whose Hello arrives from now on; it
  // fires once.
  void Arm(const Attack& attack);

  // How many armed attacks fired, and what the relay did.
  size_t fired() const;
  std::vector<RelayEvent> events() const;
  std::vector<RelayConnection> connections() const;
  // Every event and connection, one a line, for a failure message.
  std::string Log() const;

  // Closes the listener and every connection, and joins the threads.
  void Stop();

 private:
  struct Conn;
  struct Armed {
    Attack attack;
    bool fired = false;
  };
  struct Packet {
    std::vector<uint8_t> bytes;
    uint64_t index = 0;
    uint64_t round = 0;
    uint16_t flags = 0;
    size_t header_bytes = 0;
    bool has_payload() const { return bytes.size() > header_bytes; }
  };

  void AcceptLoop();
  void Upstream(std::shared_ptr<Conn> c);
  void Downstream(std::shared_ptr<Conn> c);
  // kStripGranted, on `reply` (a HelloReply) before it goes on.
  void MaybeStripGranted(const std::shared_ptr<Conn>& c, uint8_t* reply);
  void DownstreamFrames(const std::shared_ptr<Conn>& c, bool sealed);
  void MaybeForgeRoundDone(const std::shared_ptr<Conn>& c, const Packet& sync);
  void DataLoop(const std::shared_ptr<Conn>& c);
  void ControlLoop(const std::shared_ptr<Conn>& c);
  // kCutAtFrame: cuts the connection if an armed cut wants `frame` (a
  // control frame going the way `downstream` says); true once cut.
  bool MaybeCut(const std::shared_ptr<Conn>& c,
                const std::vector<uint8_t>& frame, bool downstream);
  // kForgeErrorAtFrame: writes a made-up ERROR (with `tag` garbage bytes)
  // to the source ahead of the destination's `frame` if an armed attack
  // wants it.
  void MaybeForgeError(const std::shared_ptr<Conn>& c,
                       const std::vector<uint8_t>& frame, size_t tag);
  // Applies this connection's armed attacks to `p`; false when the
  // connection is over (truncated, or a write failed).
  bool ForwardPacket(const std::shared_ptr<Conn>& c, Packet& p);
  bool LookAhead(const std::shared_ptr<Conn>& c, Packet& p);
  void Record(const std::shared_ptr<Conn>& c, AttackKind kind, uint64_t index,
              uint64_t round, std::string what);
  std::optional<Packet> Donor(const std::shared_ptr<Conn>& c, AttackKind kind,
                              const Packet& p);
  void Archive(const std::shared_ptr<Conn>& c, const Packet& p);
  void Fail(const std::shared_ptr<Conn>& c, std::string why);

  uint16_t destination_port_;  // guarded by mu_
  const std::optional<bool> sealed_override_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;

  mutable std::mutex mu_;
  bool stopping_ = false;
  std::vector<std::shared_ptr<Armed>> armed_;
  std::vector<RelayEvent> events_;
  std::vector<std::shared_ptr<Conn>> conns_;
  std::vector<std::thread> threads_;
  // What the relay saw of each session (by session hex).
  struct SessionView {
    uint32_t channels = 0;
    std::map<uint64_t, uint64_t> pages;  // by round, in data packets
    std::map<uint64_t, uint32_t> syncs;  // by round
    std::shared_ptr<Conn> control;       // with a kForgeRoundDone armed
    std::shared_ptr<Armed> forge;
  };
  std::map<std::string, SessionView> sessions_;
  // (session hex, channel) -> the first data packets seen there, by index.
  std::map<std::pair<std::string, uint32_t>, std::map<uint64_t, Packet>>
      archive_;
  uint64_t archive_limit_ = 32;
};

}  // namespace ramferry::testing

#endif  // RAMFERRY_TESTS_SUPPORT_ATTACK_RELAY_H_
