#include "tests/support/attack_relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "proto/auth.h"
#include "proto/control.h"
#include "proto/handshake.h"
#include "proto/packet.h"
#include "proto/wire.h"
#include "tests/support/test_support.h"

namespace ramferry::testing {

namespace {

// Bounds on what the parser believes, so a corrupt stream cannot make it
// allocate without limit.
constexpr uint64_t kMaxPayloadBytes = 64ull << 20;
constexpr uint32_t kMaxFrameBytes = 16u << 20;

enum class ReadResult { kOk, kEof, kError };

// Reads exactly `n` bytes; kEof only when the peer closed before the first.
ReadResult ReadExact(int fd, uint8_t* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, p + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && got == 0) return ReadResult::kEof;
    return ReadResult::kError;
  }
  return ReadResult::kOk;
}

bool WriteAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    return false;
  }
  return true;
}

bool WriteAll(int fd, const std::vector<uint8_t>& b) {
  return WriteAll(fd, b.data(), b.size());
}

int ConnectTo(uint16_t port) {
  const int fd = ConnectToLoopback(port);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

std::string Where(bool control, uint32_t channel) {
  return control ? "control" : absl::StrCat("channel ", channel);
}

// Whether `kind` tampers with what the destination sends (the rest tamper
// with what the source sends).
bool Downward(AttackKind kind) { return kind == AttackKind::kForgeRoundDone; }

// Whether `kind` is aimed at a control connection (or a data channel).
bool OnControl(AttackKind kind) {
  return kind == AttackKind::kCutAtFrame ||
         kind == AttackKind::kForgeErrorAtFrame ||
         kind == AttackKind::kStripGranted ||
         kind == AttackKind::kFloodHeartbeats ||
         kind == AttackKind::kFloodRandom || kind == AttackKind::kReplayFrame ||
         Downward(kind);
}

// Whether any entry of a data packet is a zero page (carries no bytes).
bool OffsetsFlagged(const std::vector<uint8_t>& packet, size_t header_bytes) {
  const uint8_t* o = packet.data() + proto::kPacketFixedBytes;
  for (size_t i = 0; i < (header_bytes - proto::kPacketFixedBytes) / 8; ++i) {
    if (proto::IsZeroPageEntry(proto::Load64(o + 8 * i))) return true;
  }
  return false;
}

// A data packet's entries i < j whose offsets differ in exactly one bit:
// flipping it in entry i sends page i onto page j, which the same packet
// (so the same thread of the destination) writes too.
struct Twin {
  uint32_t entry = 0;
  int bit = 0;
};
std::optional<Twin> OneBitTwin(const std::vector<uint8_t>& packet,
                               size_t header_bytes) {
  const uint8_t* o = packet.data() + proto::kPacketFixedBytes;
  const size_t n = (header_bytes - proto::kPacketFixedBytes) / 8;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t a = proto::Load64(o + 8 * i);
    if (proto::IsZeroPageEntry(a)) continue;
    for (size_t j = i + 1; j < n; ++j) {
      const uint64_t diff = a ^ proto::Load64(o + 8 * j);
      if (diff != 0 && (diff & (diff - 1)) == 0 &&
          (diff & proto::kZeroPageFlag) == 0) {
        return Twin{static_cast<uint32_t>(i), __builtin_ctzll(diff)};
      }
    }
  }
  return std::nullopt;
}

}  // namespace

const char* AttackKindName(AttackKind kind) {
  switch (kind) {
    case AttackKind::kNone:
      return "none";
    case AttackKind::kFlipHeader:
      return "flip-header";
    case AttackKind::kFlipOffset:
      return "flip-offset";
    case AttackKind::kFlipPayload:
      return "flip-payload";
    case AttackKind::kForge:
      return "forge";
    case AttackKind::kForgeInsert:
      return "forge-insert";
    case AttackKind::kReplay:
      return "replay";
    case AttackKind::kDrop:
      return "drop";
    case AttackKind::kReorder:
      return "reorder";
    case AttackKind::kSpliceChannel:
      return "splice-channel";
    case AttackKind::kSpliceSession:
      return "splice-session";
    case AttackKind::kTruncate:
      return "truncate";
    case AttackKind::kForgeTruncate:
      return "forge-truncate";
    case AttackKind::kFloodHeartbeats:
      return "flood-heartbeats";
    case AttackKind::kFloodRandom:
      return "flood-random";
    case AttackKind::kReplayFrame:
      return "replay-frame";
    case AttackKind::kForgeRoundDone:
      return "forge-round-done";
    case AttackKind::kCutAtFrame:
      return "cut-at-frame";
    case AttackKind::kForgeErrorAtFrame:
      return "forge-error-at-frame";
    case AttackKind::kStripGranted:
      return "strip-granted";
    case AttackKind::kFlipNextHeader:
      return "flip-next-header";
  }
  return "?";
}

struct AttackRelay::Conn {
  Conn(int s, int d) : src(s), dst(d), reply_future(reply.get_future()) {}
  ~Conn() {
    close(src);
    close(dst);
  }
  // Ends both directions now: every blocked call on either socket returns.
  void Sever() {
    shutdown(src, SHUT_RDWR);
    shutdown(dst, SHUT_RDWR);
  }

  const int src;         // the source's connection to the relay
  const int dst;         // the relay's connection to the destination
  RelayConnection info;  // guarded by AttackRelay::mu_
  // Set by the downstream thread once the HelloReply is in: the granted
  // capabilities, or nothing when the connection was not admitted.
  std::promise<std::optional<uint64_t>> reply;
  std::future<std::optional<uint64_t>> reply_future;
  bool reply_set = false;  // downstream thread only
  // Set by the upstream thread before it forwards the Hello, so before the
  // reply: an attack will write between the destination's frames.
  bool forged_downstream = false;  // guarded by mu_
  // Held while writing to `src` from the destination's side.
  std::mutex down_write_mu;
  // Upstream thread only.
  std::vector<std::shared_ptr<Armed>> attacks;
  std::optional<Packet> prev;
  std::optional<Packet> held;
  std::optional<Packet> lookahead;  // kFlipNextHeader
  int64_t renumber = 0;             // added to every packet number from here on
  int64_t renumber_next = 0;        // added to the next packet's only
};

AttackRelay::AttackRelay(uint16_t destination_port, std::optional<bool> sealed)
    : destination_port_(destination_port), sealed_override_(sealed) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (listen_fd_ >= 0 &&
      bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      listen(listen_fd_, 64) == 0 &&
      getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port_ = ntohs(a.sin_port);
  }
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

AttackRelay::~AttackRelay() { Stop(); }

void AttackRelay::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  // Wakes accept(); the fd is closed once the thread is gone.
  shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  close(listen_fd_);
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& c : conns_) c->Sever();
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void AttackRelay::Retarget(uint16_t destination_port) {
  std::lock_guard<std::mutex> l(mu_);
  destination_port_ = destination_port;
}

void AttackRelay::KeepPackets(uint64_t first) {
  std::lock_guard<std::mutex> l(mu_);
  archive_limit_ = first;
}

void AttackRelay::Arm(const Attack& attack) {
  std::lock_guard<std::mutex> l(mu_);
  armed_.push_back(std::make_shared<Armed>(Armed{attack, false}));
}

size_t AttackRelay::fired() const {
  std::lock_guard<std::mutex> l(mu_);
  return std::count_if(armed_.begin(), armed_.end(),
                       [](const auto& a) { return a->fired; });
}

std::vector<RelayEvent> AttackRelay::events() const {
  std::lock_guard<std::mutex> l(mu_);
  return events_;
}

std::vector<RelayConnection> AttackRelay::connections() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<RelayConnection> out;
  for (const auto& c : conns_) out.push_back(c->info);
  return out;
}

std::string AttackRelay::Log() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string out;
  for (const RelayEvent& e : events_) {
    absl::StrAppendFormat(&out,
                          "event %s on %s of session %s, index %d round "
                          "%d: %s\n",
                          AttackKindName(e.kind), Where(e.control, e.channel),
                          e.session.substr(0, 8), e.index, e.round, e.what);
  }
  for (const auto& c : conns_) {
    const RelayConnection& i = c->info;
    absl::StrAppendFormat(
        &out,
        "connection %s of session %s: auth %d admitted %d sealed %d packets "
        "%d (data %d sync %d finish %d ranges %d) pages %d frames %d up %d "
        "down %d%s%s\n",
        Where(i.control, i.channel), i.session.substr(0, 8), i.authenticated,
        i.admitted, i.sealed, i.packets, i.data_packets, i.syncs, i.finishes,
        i.zero_ranges, i.pages, i.frames, i.bytes_up, i.bytes_down,
        i.ended_cleanly ? " clean end" : "",
        i.parse_error.empty() ? "" : " parse error: " + i.parse_error);
  }
  return out;
}

void AttackRelay::AcceptLoop() {
  while (true) {
    int s = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (s < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down
    }
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    uint16_t port;
    {
      std::lock_guard<std::mutex> l(mu_);
      port = destination_port_;
    }
    int d = ConnectTo(port);
    if (d < 0) {
      close(s);
      continue;
    }
    auto c = std::make_shared<Conn>(s, d);
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) {
      c->Sever();
      return;
    }
    conns_.push_back(c);
    threads_.emplace_back([this, c] { Upstream(c); });
    threads_.emplace_back([this, c] { Downstream(c); });
  }
}

void AttackRelay::Fail(const std::shared_ptr<Conn>& c, std::string why) {
  std::lock_guard<std::mutex> l(mu_);
  if (c->info.parse_error.empty()) c->info.parse_error = std::move(why);
}

void AttackRelay::Record(const std::shared_ptr<Conn>& c, AttackKind kind,
                         uint64_t index, uint64_t round, std::string what) {
  std::lock_guard<std::mutex> l(mu_);
  events_.push_back(RelayEvent{kind,
                               c->info.session,
                               c->info.control,
                               c->info.channel,
                               index,
                               round,
                               std::move(what),
                               absl::Now(),
                               {},
                               0});
}

// Destination to source: the challenge and the reply are parsed (the
// reply says whether the connection was admitted and what was granted),
// everything after is forwarded as it comes.
void AttackRelay::Downstream(std::shared_ptr<Conn> c) {
  auto settle = [&](std::optional<uint64_t> granted) {
    if (c->reply_set) return;
    c->reply_set = true;
    c->reply.set_value(granted);
  };
  uint8_t first[proto::kHelloReplyBytes];
  bool ok =
      ReadExact(c->dst, first, proto::kAuthChallengeBytes) == ReadResult::kOk;
  if (ok && proto::Load32(first) == proto::kAuthChallengeMagic) {
    {
      std::lock_guard<std::mutex> l(mu_);
      c->info.authenticated = true;
    }
    ok = WriteAll(c->src, first, proto::kAuthChallengeBytes) &&
         ReadExact(c->dst, first, proto::kHelloReplyBytes) == ReadResult::kOk;
  } else if (ok) {
    ok = ReadExact(c->dst, first + proto::kAuthChallengeBytes,
                   proto::kHelloReplyBytes - proto::kAuthChallengeBytes) ==
         ReadResult::kOk;
  }
  if (ok && proto::Load32(first) == proto::kHelloReplyMagic) {
    MaybeStripGranted(c, first);
    const bool accepted = proto::Load16(first + 6) == 0;
    const uint64_t granted = proto::Load64(first + 8);
    {
      std::lock_guard<std::mutex> l(mu_);
      c->info.admitted = accepted;
      c->info.granted = granted;
      c->info.sealed = sealed_override_.value_or(
          accepted && (granted & kSealedFeatureBits) != 0);
      c->info.bytes_down += proto::kHelloReplyBytes;
    }
    settle(accepted ? std::optional<uint64_t>(granted) : std::nullopt);
    ok = WriteAll(c->src, first, proto::kHelloReplyBytes);
  }
  settle(std::nullopt);
  if (!ok) {
    c->Sever();
    return;
  }
  bool framed, sealed;
  {
    std::lock_guard<std::mutex> l(mu_);
    framed = c->forged_downstream;
    sealed = c->info.sealed;
  }
  if (framed) return DownstreamFrames(c, sealed);
  std::vector<uint8_t> buf(64 << 10);
  while (true) {
    ssize_t n = recv(c->dst, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      shutdown(c->src, SHUT_WR);  // the destination is done talking
      return;
    }
    if (n < 0 || !WriteAll(c->src, buf.data(), static_cast<size_t>(n))) {
      c->Sever();
      return;
    }
    std::lock_guard<std::mutex> l(mu_);
    c->info.bytes_down += static_cast<uint64_t>(n);
  }
}

// The destination's control frames, parsed and written whole under the
// connection's write lock, so that a forged one (kForgeRoundDone, written
// by a data channel's thread) goes between two of them.
void AttackRelay::DownstreamFrames(const std::shared_ptr<Conn>& c,
                                   bool sealed) {
  const size_t tag = sealed ? kControlTagBytes : 0;
  while (true) {
    std::vector<uint8_t> frame(proto::kFrameHeaderBytes);
    ReadResult r = ReadExact(c->dst, frame.data(), frame.size());
    if (r == ReadResult::kEof) {
      shutdown(c->src, SHUT_WR);
      return;
    }
    if (r != ReadResult::kOk) return c->Sever();
    const uint32_t length = proto::Load32(frame.data() + 4);
    if (length > kMaxFrameBytes) return c->Sever();
    frame.resize(proto::kFrameHeaderBytes + length + tag);
    if (ReadExact(c->dst, frame.data() + proto::kFrameHeaderBytes,
                  length + tag) != ReadResult::kOk) {
      return c->Sever();
    }
    if (MaybeCut(c, frame, /*downstream=*/true)) return;
    MaybeForgeError(c, frame, tag);
    {
      std::lock_guard<std::mutex> w(c->down_write_mu);
      if (!WriteAll(c->src, frame)) return c->Sever();
    }
    std::lock_guard<std::mutex> l(mu_);
    c->info.bytes_down += frame.size();
  }
}

// kForgeRoundDone: called on a data channel's thread with the SYNC it is
// about to forward. Once the source has sent every channel's SYNC of the
// attacked round but this one, the destination cannot have applied the
// round: the source gets a ROUND_DONE for it now, with the page count it
// expects, and this SYNC follows a little later.
void AttackRelay::MaybeForgeRoundDone(const std::shared_ptr<Conn>& c,
                                      const Packet& sync) {
  std::shared_ptr<Conn> control;
  uint64_t pages = 0;
  bool sealed = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    SessionView& v = sessions_[c->info.session];
    const uint32_t seen = ++v.syncs[sync.round];
    if (!v.forge || v.forge->fired || v.control == nullptr ||
        sync.round != v.forge->attack.at_round || seen < v.channels) {
      return;
    }
    v.forge->fired = true;
    control = v.control;
    pages = v.pages[sync.round];
    sealed = control->info.sealed;
  }
  std::vector<uint8_t> forged = proto::EncodeRoundDone({sync.round, pages});
  std::mt19937_64 rng(std::random_device{}());
  for (size_t t = 0; t < (sealed ? kControlTagBytes : 0); ++t) {
    forged.push_back(static_cast<uint8_t>(rng()));
  }
  Record(control, AttackKind::kForgeRoundDone, sync.index, sync.round,
         absl::StrFormat("ROUND_DONE for round %d (%d pages) while channel "
                         "%d's SYNC of it was held back",
                         sync.round, pages, c->info.channel));
  {
    std::lock_guard<std::mutex> w(control->down_write_mu);
    if (!WriteAll(control->src, forged)) return;
  }
  // Long enough for a source that believed it to say so first.
  absl::SleepFor(absl::Milliseconds(300));
}

// Source to destination: Hello, proof, then packets or frames.
void AttackRelay::Upstream(std::shared_ptr<Conn> c) {
  uint8_t hello[proto::kHelloBytes];
  if (ReadExact(c->src, hello, sizeof hello) != ReadResult::kOk ||
      proto::Load32(hello) != proto::kHelloMagic) {
    c->Sever();
    return;
  }
  const bool control =
      proto::Load16(hello + 6) == static_cast<uint16_t>(proto::Role::kControl);
  const uint32_t channel = proto::Load32(hello + 24);
  const bool auth = proto::Load16(hello + 46) == proto::kAuthHmacSha256;
  {
    std::lock_guard<std::mutex> l(mu_);
    c->info.session = absl::BytesToHexString(absl::string_view(
        reinterpret_cast<const char*>(hello + 8), proto::kAuthNonceBytes));
    c->info.control = control;
    c->info.channel = channel;
    c->info.bytes_up = sizeof hello;
    for (const auto& a : armed_) {
      const AttackKind kind = a->attack.kind;
      if (a->fired || kind == AttackKind::kNone || OnControl(kind) != control ||
          (!control && !a->attack.any_channel &&
           a->attack.channel != channel)) {
        continue;
      }
      if (Downward(kind)) {
        c->forged_downstream = true;
        sessions_[c->info.session].control = c;
        sessions_[c->info.session].forge = a;
      } else {
        // A cut downstream needs the destination's frames parsed.
        if ((kind == AttackKind::kCutAtFrame && a->attack.downstream) ||
            kind == AttackKind::kForgeErrorAtFrame) {
          c->forged_downstream = true;
        }
        c->attacks.push_back(a);
      }
    }
    sessions_[c->info.session].channels = proto::Load32(hello + 28);
  }
  if (!WriteAll(c->dst, hello, sizeof hello)) return c->Sever();
  if (auth) {
    uint8_t proof[proto::kAuthProofBytes];
    if (ReadExact(c->src, proof, sizeof proof) != ReadResult::kOk ||
        !WriteAll(c->dst, proof, sizeof proof)) {
      return c->Sever();
    }
    std::lock_guard<std::mutex> l(mu_);
    c->info.bytes_up += sizeof proof;
  }
  // The source sends nothing more before the reply admits it.
  if (!c->reply_future.get().has_value()) {
    shutdown(c->dst, SHUT_WR);
    return;
  }
  if (control) {
    ControlLoop(c);
  } else {
    DataLoop(c);
  }
}

void AttackRelay::DataLoop(const std::shared_ptr<Conn>& c) {
  for (uint64_t index = 0;; ++index) {
    Packet p;
    p.index = index;
    p.bytes.resize(proto::kPacketFixedBytes);
    ReadResult r = ReadExact(c->src, p.bytes.data(), p.bytes.size());
    if (r == ReadResult::kEof) {
      {
        std::lock_guard<std::mutex> l(mu_);
        c->info.ended_cleanly = true;
      }
      if (c->lookahead && !WriteAll(c->dst, c->lookahead->bytes)) {
        return c->Sever();
      }
      if (c->held && !WriteAll(c->dst, c->held->bytes)) return c->Sever();
      shutdown(c->dst, SHUT_WR);
      return;
    }
    if (r != ReadResult::kOk) return c->Sever();
    const uint8_t* h = p.bytes.data();
    if (proto::Load32(h) != proto::kPacketMagic) {
      Fail(c, absl::StrFormat("packet %d: bad magic", index));
      return c->Sever();
    }
    p.flags = proto::Load16(h + 6);
    const uint32_t page_count = proto::Load32(h + 12);
    p.round = proto::Load64(h + 24);
    const uint32_t page_size = proto::Load32(h + 36);
    const uint32_t compressed = proto::Load32(h + 44);
    if (page_count > proto::kMaxPacketPagesLimit) {
      Fail(c, absl::StrFormat("packet %d: %d pages", index, page_count));
      return c->Sever();
    }
    p.header_bytes = proto::PacketHeaderBytes(page_count);
    p.bytes.resize(p.header_bytes);
    if (ReadExact(c->src, p.bytes.data() + proto::kPacketFixedBytes,
                  p.header_bytes - proto::kPacketFixedBytes) !=
        ReadResult::kOk) {
      return c->Sever();
    }
    uint64_t payload = 0;
    uint64_t pages = 0;
    if (p.flags == proto::kPacketData) {
      for (uint32_t i = 0; i < page_count; ++i) {
        const uint64_t entry =
            proto::Load64(p.bytes.data() + proto::kPacketFixedBytes + 8 * i);
        if (!proto::IsZeroPageEntry(entry)) ++pages;
      }
      payload = compressed != 0 ? compressed : pages * page_size;
    }
    if (payload > kMaxPayloadBytes) {
      Fail(c,
           absl::StrFormat("packet %d: payload of %d bytes", index, payload));
      return c->Sever();
    }
    p.bytes.resize(p.header_bytes + payload);
    if (payload > 0 && ReadExact(c->src, p.bytes.data() + p.header_bytes,
                                 payload) != ReadResult::kOk) {
      return c->Sever();
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      RelayConnection& i = c->info;
      ++i.packets;
      i.bytes_up += p.bytes.size();
      if (p.flags == proto::kPacketData) {
        ++i.data_packets;
        i.pages += page_count;
        sessions_[i.session].pages[p.round] += page_count;
      }
      if (p.flags == proto::kPacketSync) ++i.syncs;
      if (p.flags == proto::kPacketFinish) ++i.finishes;
      if (p.flags == proto::kPacketZeroRanges) ++i.zero_ranges;
    }
    if (p.flags == proto::kPacketSync) MaybeForgeRoundDone(c, p);
    if (!LookAhead(c, p)) return;
  }
}

void AttackRelay::Archive(const std::shared_ptr<Conn>& c, const Packet& p) {
  if (p.flags != proto::kPacketData || !p.has_payload()) return;
  std::lock_guard<std::mutex> l(mu_);
  if (p.index < archive_limit_) {
    archive_[{c->info.session, c->info.channel}][p.index] = p;
  }
}

std::optional<AttackRelay::Packet> AttackRelay::Donor(
    const std::shared_ptr<Conn>& c, AttackKind kind, const Packet& p) {
  // The best donor announces the same next header as `p` (so the stream
  // after it still frames: the destination may read a payload and the
  // announced next header in one call), then has p's index.
  const uint32_t next = proto::Load32(p.bytes.data() + 40);
  std::lock_guard<std::mutex> l(mu_);
  const Packet* best = nullptr;
  int best_score = -1;
  for (const auto& [key, packets] : archive_) {
    const bool same_session = key.first == c->info.session;
    const bool same_channel = key.second == c->info.channel;
    const bool wanted = kind == AttackKind::kSpliceChannel
                            ? same_session && !same_channel
                            : !same_session && same_channel;
    if (!wanted) continue;
    for (const auto& [index, d] : packets) {
      const int score =
          2 * (proto::Load32(d.bytes.data() + 40) == next) + (index == p.index);
      if (score >= best_score) {
        best = &d;
        best_score = score;
      }
    }
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

// kFlipNextHeader needs to know which data packet is the last before a
// SYNC: each one waits here for the packet after it.
bool AttackRelay::LookAhead(const std::shared_ptr<Conn>& c, Packet& p) {
  std::shared_ptr<Armed> attack;
  for (const auto& a : c->attacks) {
    if (a->attack.kind == AttackKind::kFlipNextHeader) attack = a;
  }
  if (attack == nullptr) return ForwardPacket(c, p);
  if (c->lookahead) {
    Packet last = std::move(*c->lookahead);
    c->lookahead.reset();
    bool claimed = false;
    // 0: the source did not know the next header; the destination reads
    // it on its own then, and there is nothing to tamper with.
    if (p.flags == proto::kPacketSync &&
        proto::Load32(last.bytes.data() + 40) != 0) {
      std::lock_guard<std::mutex> l(mu_);
      claimed = !attack->fired;
      attack->fired = true;
    }
    if (claimed) {
      // It announces the SYNC's 64 bytes; one bit more announces 72.
      uint8_t* next = last.bytes.data() + 40;
      const uint32_t before = proto::Load32(next);
      proto::Store32(next, before ^ 8);
      Record(c, attack->attack.kind, last.index, last.round,
             absl::StrFormat("the last data packet before a SYNC announces a "
                             "next header of %d bytes, not %d",
                             before ^ 8, before));
    }
    if (!ForwardPacket(c, last)) return false;
  }
  bool waiting;
  {
    std::lock_guard<std::mutex> l(mu_);
    waiting = !attack->fired;
  }
  if (waiting && p.flags == proto::kPacketData && p.has_payload() &&
      p.round >= attack->attack.at_round) {
    c->lookahead = std::move(p);
    return true;
  }
  return ForwardPacket(c, p);
}

namespace {

void AddToPacketNumber(std::vector<uint8_t>& packet, int64_t delta) {
  uint8_t* num = packet.data() + 16;
  proto::Store64(num, proto::Load64(num) + static_cast<uint64_t>(delta));
}

}  // namespace

bool AttackRelay::ForwardPacket(const std::shared_ptr<Conn>& c, Packet& p) {
  Archive(c, p);
  // An attack that renumbers (Attack::renumber) shifts what follows it.
  if (const int64_t delta = c->renumber + c->renumber_next; delta != 0) {
    AddToPacketNumber(p.bytes, delta);
    c->renumber_next = 0;
  }
  const bool data = p.flags == proto::kPacketData;
  const bool paged = data && p.has_payload();
  std::shared_ptr<Armed> chosen;
  std::optional<Packet> donor;
  for (const auto& a : c->attacks) {
    const Attack& at = a->attack;
    if (p.index < at.at_index || p.round < at.at_round) continue;
    bool suits = false;
    switch (at.kind) {
      case AttackKind::kFlipHeader:
        suits = true;
        break;
      case AttackKind::kFlipOffset:
        suits = data && p.header_bytes > proto::kPacketFixedBytes &&
                (at.offset_bit >= 0 ||
                 OneBitTwin(p.bytes, p.header_bytes).has_value());
        break;
      case AttackKind::kFlipPayload:
      case AttackKind::kForge:
      case AttackKind::kForgeInsert:
      case AttackKind::kTruncate:
      case AttackKind::kDrop:
      case AttackKind::kReorder:
        suits = paged;
        break;
      case AttackKind::kForgeTruncate:
        // Every page of it carried (no zero-page entry) and uncompressed:
        // each forged page has its bytes in the payload.
        suits = paged && proto::Load32(p.bytes.data() + 44) == 0 &&
                !OffsetsFlagged(p.bytes, p.header_bytes);
        break;
      case AttackKind::kReplay:
        suits = paged && c->prev.has_value() &&
                c->prev->flags == proto::kPacketData;
        break;
      case AttackKind::kSpliceChannel:
      case AttackKind::kSpliceSession:
        if (paged) {
          donor = Donor(c, at.kind, p);
          suits = donor.has_value();
        }
        break;
      default:
        break;
    }
    if (!suits) continue;
    std::lock_guard<std::mutex> l(mu_);
    if (a->fired) continue;
    a->fired = true;
    chosen = a;
    break;
  }

  auto write = [&](const std::vector<uint8_t>& b) {
    if (WriteAll(c->dst, b)) return true;
    c->Sever();
    return false;
  };
  auto made_up = [&] {
    Packet f = p;
    for (size_t i = f.header_bytes; i < f.bytes.size(); ++i) f.bytes[i] ^= 0xa5;
    return f;
  };
  bool forward = true;                  // p itself goes on, as it is by then
  std::optional<Packet> ahead, behind;  // sent before and after p
  if (chosen) {
    const Attack& at = chosen->attack;
    const uint64_t index = p.index;
    const uint64_t round = p.round;
    std::string what;
    std::vector<uint8_t> forged_page;
    uint64_t forged_offset = 0;
    switch (at.kind) {
      case AttackKind::kFlipHeader:
        p.bytes[at.byte] ^= static_cast<uint8_t>(1u << at.bit);
        what = absl::StrFormat("flipped bit %d of header byte %d", at.bit,
                               at.byte);
        break;
      case AttackKind::kFlipOffset: {
        Twin twin{0, at.offset_bit};
        if (at.offset_bit < 0) twin = *OneBitTwin(p.bytes, p.header_bytes);
        uint8_t* o = p.bytes.data() + proto::kPacketFixedBytes + 8 * twin.entry;
        const uint64_t before = proto::Load64(o);
        const uint64_t after = before ^ (uint64_t{1} << twin.bit);
        proto::Store64(o, after);
        what = absl::StrFormat("offset %d: 0x%x -> 0x%x", twin.entry, before,
                               after);
        break;
      }
      case AttackKind::kFlipPayload: {
        const size_t at_byte = (p.header_bytes + p.bytes.size()) / 2;
        p.bytes[at_byte] ^= static_cast<uint8_t>(1u << at.bit);
        what = absl::StrFormat("flipped bit %d of payload byte %d", at.bit,
                               at_byte - p.header_bytes);
        break;
      }
      case AttackKind::kForge:
        p = made_up();
        what = absl::StrFormat("payload of %d bytes replaced",
                               p.bytes.size() - p.header_bytes);
        if (proto::Load32(p.bytes.data() + 44) == 0) {
          forged_offset = proto::Load64(p.bytes.data() + 64);
          const size_t page = proto::Load32(p.bytes.data() + 36);
          forged_page.assign(p.bytes.begin() + p.header_bytes,
                             p.bytes.begin() + p.header_bytes + page);
        }
        break;
      case AttackKind::kForgeInsert:
        ahead = made_up();
        what = "a made-up copy went ahead of it";
        break;
      case AttackKind::kReplay:
        behind = c->prev;
        what = absl::StrFormat("replayed packet %d after it", c->prev->index);
        if (at.renumber) {
          // As the packet after this one, and every later one a number on.
          AddToPacketNumber(
              behind->bytes,
              static_cast<int64_t>(proto::Load64(p.bytes.data() + 16)) -
                  static_cast<int64_t>(
                      proto::Load64(behind->bytes.data() + 16)) +
                  1);
          c->renumber += 1;
          what += ", renumbered to follow it";
        }
        break;
      case AttackKind::kDrop:
        forward = false;
        what = "dropped";
        if (at.renumber) {
          c->renumber -= 1;
          what += "; later packets renumbered to close the gap";
        }
        break;
      case AttackKind::kReorder:
        forward = false;
        c->held = p;
        what = "held back, to follow the next packet";
        if (at.renumber) {
          AddToPacketNumber(c->held->bytes, 1);
          c->renumber_next = -1;
          what += "; the two swap numbers";
        }
        break;
      case AttackKind::kSpliceChannel:
      case AttackKind::kSpliceSession:
        what = absl::StrFormat(
            "replaced by packet %d (round %d) of channel %d of %s session",
            donor->index, donor->round, proto::Load32(donor->bytes.data() + 8),
            at.kind == AttackKind::kSpliceChannel ? "this" : "another");
        p = std::move(*donor);
        break;
      case AttackKind::kForgeTruncate: {
        p = made_up();
        const size_t page = proto::Load32(p.bytes.data() + 36);
        const size_t count = (p.header_bytes - proto::kPacketFixedBytes) / 8;
        for (size_t i = 0; i < count; ++i) {
          proto::Store64(p.bytes.data() + proto::kPacketFixedBytes + 8 * i,
                         at.forged_base + i * page);
        }
        const size_t half = (p.header_bytes + p.bytes.size()) / 2;
        Record(c, at.kind, index, round,
               absl::StrFormat("offsets of %d pages moved to 0x%x, payload "
                               "made up; forwarded %d of %d bytes, then "
                               "closed",
                               count, at.forged_base, half, p.bytes.size()));
        {
          std::lock_guard<std::mutex> l(mu_);
          events_.back().forged_page.assign(
              p.bytes.begin() + p.header_bytes,
              p.bytes.begin() + p.header_bytes + page);
          events_.back().forged_offset = at.forged_base;
        }
        if (WriteAll(c->dst, p.bytes.data(), half)) {
          absl::SleepFor(absl::Milliseconds(10));
        }
        c->Sever();
        return false;
      }
      case AttackKind::kTruncate: {
        const size_t half = (p.header_bytes + p.bytes.size()) / 2;
        Record(c, at.kind, index, round,
               absl::StrFormat("forwarded %d of %d bytes, then closed", half,
                               p.bytes.size()));
        if (WriteAll(c->dst, p.bytes.data(), half)) {
          // Let the half reach the destination before the close does.
          absl::SleepFor(absl::Milliseconds(10));
        }
        c->Sever();
        return false;
      }
      default:
        break;
    }
    // Recorded before the bytes go: the ends cannot react to an attack the
    // log does not hold yet.
    Record(c, at.kind, index, round, std::move(what));
    if (!forged_page.empty()) {
      std::lock_guard<std::mutex> l(mu_);
      events_.back().forged_page = std::move(forged_page);
      events_.back().forged_offset = forged_offset;
    }
  }
  if (ahead && !write(ahead->bytes)) return false;
  if (forward && !write(p.bytes)) return false;
  if (behind && !write(behind->bytes)) return false;
  if (c->held && c->held->index != p.index) {
    if (!write(c->held->bytes)) return false;
    c->held.reset();
  }
  c->prev = std::move(p);
  return true;
}

void AttackRelay::MaybeStripGranted(const std::shared_ptr<Conn>& c,
                                    uint8_t* reply) {
  std::vector<std::shared_ptr<Armed>> attacks;
  {
    std::lock_guard<std::mutex> l(mu_);
    attacks = c->attacks;
  }
  for (const auto& a : attacks) {
    if (a->attack.kind != AttackKind::kStripGranted) continue;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (a->fired) continue;
      a->fired = true;
    }
    const uint64_t granted = proto::Load64(reply + 8);
    proto::Store64(reply + 8, granted & ~a->attack.strip);
    Record(c, AttackKind::kStripGranted, 0, 0,
           absl::StrFormat("granted 0x%x went on as 0x%x", granted,
                           granted & ~a->attack.strip));
  }
}

void AttackRelay::MaybeForgeError(const std::shared_ptr<Conn>& c,
                                  const std::vector<uint8_t>& frame,
                                  size_t tag) {
  const uint32_t type = proto::Load32(frame.data());
  for (const auto& a : c->attacks) {
    if (a->attack.kind != AttackKind::kForgeErrorAtFrame ||
        a->attack.frame_type != type) {
      continue;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (a->fired) continue;
      a->fired = true;
    }
    std::vector<uint8_t> forged = proto::EncodeError(
        proto::MakeErrorMessage(absl::CancelledError("forged by the relay")));
    std::mt19937_64 rng(std::random_device{}());
    for (size_t t = 0; t < tag; ++t)
      forged.push_back(static_cast<uint8_t>(rng()));
    Record(c, AttackKind::kForgeErrorAtFrame, 0, 0,
           absl::StrFormat("an ERROR made up ahead of frame type %d from the "
                           "destination",
                           type));
    std::lock_guard<std::mutex> w(c->down_write_mu);
    (void)WriteAll(c->src, forged);
  }
}

bool AttackRelay::MaybeCut(const std::shared_ptr<Conn>& c,
                           const std::vector<uint8_t>& frame, bool downstream) {
  const uint32_t type = proto::Load32(frame.data());
  for (const auto& a : c->attacks) {
    if (a->attack.kind != AttackKind::kCutAtFrame ||
        a->attack.downstream != downstream || a->attack.frame_type != type) {
      continue;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (a->fired) continue;
      a->fired = true;
    }
    Record(
        c, AttackKind::kCutAtFrame, 0, 0,
        absl::StrFormat(
            "cut %s frame type %d (%s)", a->attack.forward ? "after" : "before",
            type, downstream ? "from the destination" : "from the source"));
    if (a->attack.forward) {
      std::lock_guard<std::mutex> w(c->down_write_mu);
      (void)WriteAll(downstream ? c->src : c->dst, frame);
    }
    c->Sever();
    return true;
  }
  return false;
}

void AttackRelay::ControlLoop(const std::shared_ptr<Conn>& c) {
  bool sealed;
  {
    std::lock_guard<std::mutex> l(mu_);
    sealed = c->info.sealed;
  }
  const size_t tag = sealed ? kControlTagBytes : 0;
  std::mt19937_64 rng(std::random_device{}());
  for (uint64_t index = 0;; ++index) {
    std::vector<uint8_t> frame(proto::kFrameHeaderBytes);
    ReadResult r = ReadExact(c->src, frame.data(), frame.size());
    if (r == ReadResult::kEof) {
      {
        std::lock_guard<std::mutex> l(mu_);
        c->info.ended_cleanly = true;
      }
      shutdown(c->dst, SHUT_WR);
      return;
    }
    if (r != ReadResult::kOk) return c->Sever();
    const uint32_t length = proto::Load32(frame.data() + 4);
    if (length > kMaxFrameBytes) {
      Fail(c, absl::StrFormat("frame %d: %d bytes", index, length));
      return c->Sever();
    }
    frame.resize(proto::kFrameHeaderBytes + length + tag);
    if (ReadExact(c->src, frame.data() + proto::kFrameHeaderBytes,
                  length + tag) != ReadResult::kOk) {
      return c->Sever();
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      ++c->info.frames;
      c->info.bytes_up += frame.size();
    }
    if (MaybeCut(c, frame, /*downstream=*/false)) return;
    if (!WriteAll(c->dst, frame)) return c->Sever();
    for (const auto& a : c->attacks) {
      if (index < a->attack.at_index ||
          a->attack.kind == AttackKind::kCutAtFrame ||
          a->attack.kind == AttackKind::kForgeErrorAtFrame) {
        continue;
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        if (a->fired) continue;
        a->fired = true;
      }
      std::vector<uint8_t> flood;
      const int count = a->attack.count;
      if (a->attack.kind == AttackKind::kReplayFrame) {
        flood = frame;
      } else if (a->attack.kind == AttackKind::kFloodHeartbeats) {
        for (int i = 0; i < count; ++i) {
          std::vector<uint8_t> beat = proto::EncodeHeartbeat();
          for (size_t t = 0; t < tag; ++t) {
            beat.push_back(static_cast<uint8_t>(rng()));
          }
          flood.insert(flood.end(), beat.begin(), beat.end());
        }
      } else {
        flood.resize(static_cast<size_t>(count) * 24);
        for (uint8_t& b : flood) b = static_cast<uint8_t>(rng());
      }
      Record(c, a->attack.kind, index, 0,
             absl::StrFormat("%d bytes after frame type %d", flood.size(),
                             proto::Load32(frame.data())));
      if (!WriteAll(c->dst, flood)) return c->Sever();
    }
  }
}

}  // namespace ramferry::testing
