// Attacks on a live, admitted stream: a real Sender and Receiver, keyed,
// talk through a man in the middle on loopback (tests/support/attack_relay.h)
// that flips bits of a header, an offset or a page, forges, replays, drops,
// reorders, splices or truncates a packet, floods the control connection or
// replays a frame on it, or forges the destination's confirmation of a
// round, in the middle of a session of several rounds.
//
// With the stream protected (SessionOptions::protect: mac or encrypt) every
// attack must be refused: both ends stop within the stall timeout with an
// error that names the channel and the cause, no round holding a tampered
// packet is confirmed, and the source reports only rounds the destination
// really applied (checked as each round returns). Unprotected (connections
// authenticated only), the same attacks run for comparison, as
// UnprotectedReport/...: what happens is recorded, a line per run
// ("[attack-table] kind | protect | transport | outcome"), not asserted;
// only that the attack fired.
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "channels/transport.h"
#include "engine/channel_sender.h"
#include "engine/pages/region_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/control.h"
#include "proto/handshake.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/attack_relay.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/transport_selection.h"

namespace ramferry {

// Readable parameters in gtest's output.
inline void PrintTo(Protection p, std::ostream* os) {
  *os << ProtectionName(p);
}

namespace {

using ::ramferry::testing::StatusIs;
using testing::Attack;
using testing::AttackKind;
using testing::AttackRelay;
using testing::MakeRegion;
using testing::RelayEvent;
using testing::ScaledBytes;
using testing::ServingReceiver;

const std::string kKey = "attack test pre-shared key, 32 B";
constexpr uint32_t kChannels = 2;
constexpr int kRounds = 4;
// Attacks aim at this round (round 0 is confirmed before it) unless they
// say otherwise.
constexpr uint64_t kAttackRound = 1;
constexpr absl::Duration kStall = absl::Seconds(2);
// The stall timeout and room for a slow (sanitizer) build to notice.
constexpr absl::Duration kNoticeBound = absl::Seconds(8);

// What the errors must say, and with which code, in one place so they are
// easy to change when the messages do. A tampered packet fails its tag;
// some attacks are caught first by a check of the header they broke or of
// where it stands in the stream (the destination validates a header
// before it reads the payload the tag covers), which names its cause too.
struct Cause {
  std::string says;
  absl::StatusCode code;
};
const Cause kTag = {"authentication tag", absl::StatusCode::kPermissionDenied};
// A header refused before its tag is read: bad input.
Cause BadHeader(std::string says) {
  return {std::move(says), absl::StatusCode::kInvalidArgument};
}
std::vector<Cause> TagOr(std::vector<Cause> more) {
  more.push_back(kTag);
  return more;
}
// A packet out of its place in the stream: its number, or the header size
// the packet before it announced.
const std::vector<Cause> kOutOfPlace =
    TagOr({BadHeader("packet number"), BadHeader("was announced as")});
// The destination sees the stream end mid-packet; the source, unless the
// destination's word reaches it first, its own send fail.
const std::vector<Cause> kClosedCause = {
    {"closed by peer mid-packet", absl::StatusCode::kUnavailable},
    {"broken pipe", absl::StatusCode::kUnavailable},
    {"connection reset", absl::StatusCode::kUnavailable}};
// A control frame the destination cannot read, its tag or its type, ends
// its control connection: both ends report the connection lost.
Cause OnControlConnection(std::string says) {
  return {std::move(says), absl::StatusCode::kUnavailable};
}
const Cause kControlTag = OnControlConnection("authentication tag");

struct Case {
  std::string name;
  Attack attack;
  // With protection, each end's error must be one of these.
  std::vector<Cause> causes;
  // Data channels. One where a packet spliced in could name pages another
  // channel of the session writes at the same time (a race at the
  // destination the attack causes, which ThreadSanitizer would report).
  uint32_t channels = kChannels;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Attack On(AttackKind kind, uint32_t channel) {
  Attack a;
  a.kind = kind;
  a.channel = channel;
  a.at_round = kAttackRound;
  return a;
}

// With the packet numbers rewritten so the stream still counts in order:
// only the tag (its nonce is the number the destination expects) can tell.
Attack Renumbered(AttackKind kind, uint32_t channel) {
  Attack a = On(kind, channel);
  a.renumber = true;
  return a;
}

Attack OnControl(AttackKind kind) {
  Attack a;
  a.kind = kind;
  a.control = true;
  a.at_index = 0;             // a flood: right after the region table
  a.at_round = kAttackRound;  // a forged confirmation: of this round
  return a;
}

std::vector<Case> Cases() {
  Attack round_bit = On(AttackKind::kFlipHeader, 1);
  round_bit.byte = 31;  // the low byte of the round
  Attack region_bit = On(AttackKind::kFlipHeader, 0);
  region_bit.byte = 35;  // the low byte of the region id
  // In the last round, so no later round rewrites the page it left stale
  // (unprotected, the damage stays to be seen).
  Attack offset_bit = On(AttackKind::kFlipOffset, 1);
  offset_bit.at_round = kRounds - 1;
  // A packet holding two pages a bit apart, in the last round: under load
  // the scheduler may give one channel none (CI: "NOT FIRED" on
  // tcp-zerocopy), so the first channel that carries one.
  offset_bit.any_channel = true;
  // The last data packet before a SYNC that announces a next header: on
  // the first channel that sends one (seen once "NOT FIRED" on channel 0).
  Attack next_header_bit = On(AttackKind::kFlipNextHeader, 0);
  next_header_bit.any_channel = true;
  Attack tag_bit = On(AttackKind::kFlipHeader, 1);
  tag_bit.byte = 50;  // inside the tag (reserved bytes unprotected)
  tag_bit.bit = 5;
  return {
      {"FlipHeaderRound", round_bit, TagOr({BadHeader("is for round")})},
      {"FlipHeaderRegion", region_bit, TagOr({BadHeader("unknown region id")})},
      {"FlipHeaderTag", tag_bit, {kTag}},
      {"FlipNextHeaderBeforeSync", next_header_bit,
       TagOr({BadHeader("next header")})},
      {"FlipOffset", offset_bit, {kTag}},
      {"FlipPayload", On(AttackKind::kFlipPayload, 0), {kTag}},
      {"Forge", On(AttackKind::kForge, 1), {kTag}},
      {"ForgeInsert", On(AttackKind::kForgeInsert, 0), {kTag}},
      {"Replay", On(AttackKind::kReplay, 1), kOutOfPlace},
      {"ReplayRenumbered", Renumbered(AttackKind::kReplay, 0), kOutOfPlace},
      {"Drop", On(AttackKind::kDrop, 0), kOutOfPlace},
      {"DropRenumbered", Renumbered(AttackKind::kDrop, 1), kOutOfPlace},
      {"Reorder", On(AttackKind::kReorder, 1), kOutOfPlace},
      {"ReorderRenumbered", Renumbered(AttackKind::kReorder, 0), kOutOfPlace},
      {"SpliceChannel", On(AttackKind::kSpliceChannel, 1),
       TagOr({BadHeader("names channel")})},
      {"SpliceSession", On(AttackKind::kSpliceSession, 0), kOutOfPlace, 1},
      {"Truncate", On(AttackKind::kTruncate, 1), kClosedCause},
      {"FloodHeartbeats",
       OnControl(AttackKind::kFloodHeartbeats),
       {kControlTag}},
      {"FloodRandom",
       OnControl(AttackKind::kFloodRandom),
       {OnControlConnection("unknown control message"), kControlTag}},
      {"ReplayControlFrame",
       OnControl(AttackKind::kReplayFrame),
       {kControlTag}},
      {"ForgeRoundDone", OnControl(AttackKind::kForgeRoundDone), {kControlTag}},
  };
}

MATCHER_P(HasSubstrIgnoringCase, word,
          absl::StrCat("has substring \"", word, "\" in any case")) {
  return absl::StrContains(absl::AsciiStrToLower(arg),
                           absl::AsciiStrToLower(word));
}

// An error with one of `causes`' words (in any case: strerror's "Broken
// pipe") and that word's code.
::testing::Matcher<absl::Status> RefusedFor(const std::vector<Cause>& causes) {
  std::vector<::testing::Matcher<absl::Status>> any;
  for (const Cause& c : causes) {
    any.push_back(StatusIs(c.code, HasSubstrIgnoringCase(c.says)));
  }
  return ::testing::AnyOfArray(any);
}

bool SaysOneOf(const absl::Status& s, const std::vector<std::string>& words) {
  const std::string lower = absl::AsciiStrToLower(s.message());
  for (const std::string& w : words) {
    if (lower.find(absl::AsciiStrToLower(w)) != std::string::npos) {
      return true;
    }
  }
  return false;
}

// What one session through the relay came to.
struct Outcome {
  bool fired = false;
  RelayEvent event;
  absl::Status source;  // the first error the source returned, or OK
  absl::Time source_failed_at;
  absl::Status destination;
  bool destination_done = false;  // within kNoticeBound of the attack
  absl::Time destination_done_at;
  uint64_t rounds_done = 0;  // SendRound calls that returned OK
  // A round SendRound reported done while the destination had not
  // applied it (-1: none).
  int64_t claimed_unapplied = -1;
  uint64_t source_confirmed = 0;
  uint64_t destination_applied = 0;
  bool completed = false;  // every round, Verify and Finish OK
  // Where the source stands on the destination's commit
  // (Sender::commit_outcome): kUnknown keeps its workload paused.
  CommitOutcome commit_outcome = CommitOutcome::kPending;
  uint64_t verify_mismatches = 0;
  bool same_bytes = false;
  // kForge: the first made-up page is in the destination's memory (where
  // the session ended with an error too: written before it was refused).
  bool forged_landed = false;
  std::string log;

  std::string Describe() const {
    if (!fired) {
      return absl::StrFormat(
          "NOT FIRED (rounds done %d; source \"%s\"; destination \"%s\")",
          rounds_done, source.ToString(),
          destination_done ? destination.ToString() : "still running");
    }
    if (claimed_unapplied >= 0) {
      return absl::StrFormat(
          "ACCEPTED: the source reported round %d done, which the "
          "destination had not applied; then source \"%s\", destination "
          "\"%s\"",
          claimed_unapplied, source.ToString(),
          destination_done ? destination.ToString() : "still running");
    }
    if (completed) {
      return same_bytes && verify_mismatches == 0
                 ? absl::StrCat("accepted, no damage (", event.what, ")")
                 : absl::StrFormat(
                       "ACCEPTED SILENTLY, destination damaged (Verify: %d "
                       "pages differ)",
                       verify_mismatches);
    }
    return absl::StrFormat(
        "refused (source confirmed %d, destination applied %d%s): "
        "destination \"%s\"; source \"%s\"",
        source_confirmed, destination_applied,
        forged_landed ? "; the made-up page is in its memory" : "",
        destination_done ? destination.ToString() : "still running",
        source.ToString());
  }
};

// Rewrites `count` random pages of `r` from page `first` on and marks them
// dirty.
void Rewrite(const Region& r, int count, std::mt19937_64& rng,
             DirtyBitmap& dirty, uint64_t first = 0) {
  for (int i = 0; i < count; ++i) {
    const uint64_t p = first + rng() % (r.page_count() - first);
    const uint64_t v = rng();
    auto* words = reinterpret_cast<uint64_t*>(r.page(p));
    for (size_t w = 0; w < r.page_size / 8; ++w) words[w] = v + w;
    dirty.Set(p);
  }
}

// One session of kRounds rounds, Verify and Finish, through `relay`
// (pointed at a fresh destination); `attack` is armed once it connects.
// Rounds after the first rewrite pages from `rewrite_from` on only.
// `dest_file`: the destination's region maps a file (Region::fd), so its
// long runs land through it.
Outcome RunSession(AttackRelay& relay, SessionOptions o, uint64_t seed,
                   const Attack* attack, uint64_t bytes = ScaledBytes(16 << 20),
                   uint64_t rewrite_from = 0, bool dest_file = false) {
  auto src = MakeRegion(1, bytes, seed, /*fill=*/true);
  auto dst_memory = MakeRegion(1, bytes);
  testing::FileRegion dst_file =
      dest_file ? testing::MakeFileRegion(1, bytes) : testing::FileRegion{};
  const Region dst = dest_file ? dst_file.region : dst_memory.region;
  ServingReceiver rx(o, {dst});
  relay.Retarget(rx.port());
  if (attack != nullptr) relay.Arm(*attack);
  o.port = relay.port();

  Outcome run;
  auto fail = [&](const absl::Status& s) {
    run.source = s;
    run.source_failed_at = absl::Now();
  };
  absl::StatusOr<std::unique_ptr<Sender>> sender =
      Sender::Connect(o, {&src.region, 1});
  if (!sender.ok()) {
    fail(sender.status());
  } else {
    DirtyBitmap dirty(src.region.page_count());
    dirty.SetAll();
    DirtyBitmap* bitmaps[] = {&dirty};
    std::mt19937_64 rng(seed);
    for (int round = 0; round < kRounds && run.source.ok(); ++round) {
      if (round > 0) {
        Rewrite(src.region, static_cast<int>(src.region.page_count() / 4), rng,
                dirty, rewrite_from);
      }
      absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
      if (r.ok()) {
        ++run.rounds_done;
        // Applied rounds only grow: if the destination had applied this
        // one when it confirmed it, it still has now.
        if (rx.receiver().applied_rounds() < run.rounds_done &&
            run.claimed_unapplied < 0) {
          run.claimed_unapplied = round;
        }
      } else {
        fail(r.status());
      }
    }
    if (run.source.ok()) {
      absl::StatusOr<VerifyReport> v = (*sender)->Verify();
      if (v.ok()) {
        run.verify_mismatches = v->pages_mismatched;
      } else {
        fail(v.status());
      }
    }
    if (run.source.ok()) {
      if (absl::Status f = (*sender)->Finish(); !f.ok()) fail(f);
    }
    run.source_confirmed = (*sender)->confirmed_rounds();
    run.commit_outcome = (*sender)->commit_outcome();
  }

  const std::vector<RelayEvent> events = relay.events();
  run.fired = attack != nullptr && !events.empty();
  if (run.fired) run.event = events.back();
  // The destination ends on its own: wait for it as long as the bound
  // allows, counted from the attack (or the source's end).
  const absl::Time from =
      run.fired ? run.event.when
                : (run.source.ok() ? absl::Now() : run.source_failed_at);
  while (!rx.done() && absl::Now() < from + kNoticeBound) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  run.destination_done = rx.done();
  run.destination_done_at = absl::Now();
  if (run.destination_done) run.destination = rx.result();
  run.destination_applied = rx.receiver().applied_rounds();
  run.completed =
      run.source.ok() && run.destination_done && run.destination.ok();
  run.same_bytes = run.completed && testing::SameBytes(src.region, dst);
  const std::vector<uint8_t>& forged = run.event.forged_page;
  if (run.destination_done && !forged.empty() &&
      run.event.forged_offset + forged.size() <= dst.length) {
    run.forged_landed = std::memcmp(static_cast<const uint8_t*>(dst.base) +
                                        run.event.forged_offset,
                                    forged.data(), forged.size()) == 0;
  }
  run.log = relay.Log();
  return run;
}

SessionOptions Options(TransportKind kind, Protection protect,
                       uint32_t channels) {
  SessionOptions o;
  o.transport = kind;
  o.channels = channels;
  o.auth_key = kKey;
  o.stall_timeout = kStall;
  o.connect_timeout = absl::Seconds(10);
  o.handshake_timeout = absl::Seconds(10);
  // A round the destination never confirms fails the test, not the wait.
  o.round_timeout = absl::Seconds(30);
  o.protect = protect;
  return o;
}

class AttackTest
    : public ::testing::TestWithParam<std::tuple<Case, Protection>> {};

// Which of the `available` transports a sanitizer build runs `c` with
// `protect` on: one, in turn through the table, so that each case still
// meets every transport, each on another protection. Instrumented, a case
// on all three took 20 s and more, and the table was a third of the TSan
// suite; what a sanitizer looks for (races, bad accesses) is in the
// engine and the transport, not in which pairing carries the attack. The
// release build runs every case on every transport.
size_t SanitizerTurn(const Case& c, Protection protect, size_t available) {
  const std::vector<Case> all = Cases();
  size_t index = 0;
  while (index < all.size() && all[index].name != c.name) ++index;
  return (index + static_cast<size_t>(protect)) % available;
}

TEST_P(AttackTest, OnALiveStream) {
  const auto& [c, protect] = GetParam();
  std::vector<TransportKind> kinds;
  for (TransportKind kind : testing::TransportsWith(
           channels::kCapAuthenticatedHello, channels::kCapOwnsConnection)) {
    if (std::string why = testing::WhyUnavailable(kind); !why.empty()) {
      std::printf("[attack-table] %s | %s | %s | skipped: %s\n", c.name.c_str(),
                  ProtectionName(protect),
                  std::string(TransportKindName(kind)).c_str(), why.c_str());
      continue;
    }
    kinds.push_back(kind);
  }
  ASSERT_FALSE(kinds.empty());
  const size_t turn =
      testing::UnderSanitizer() ? SanitizerTurn(c, protect, kinds.size()) : 0;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const TransportKind kind = kinds[k];
    if (testing::UnderSanitizer() && k != turn) {
      std::printf(
          "[attack-table] %s | %s | %s | left to the release build "
          "(a sanitizer build runs each case on one transport)\n",
          c.name.c_str(), ProtectionName(protect),
          std::string(TransportKindName(kind)).c_str());
      continue;
    }
    SCOPED_TRACE(std::string(TransportKindName(kind)));
    const SessionOptions o = Options(kind, protect, c.channels);
    AttackRelay relay(0);
    if (c.attack.kind == AttackKind::kSpliceSession) {
      // The packets to splice in: an earlier session through this relay
      // (all its first round and more, so the same index is there).
      relay.KeepPackets(64);
      Outcome earlier = RunSession(relay, o, /*seed=*/99, nullptr);
      ASSERT_TRUE(earlier.completed) << earlier.Describe() << "\n"
                                     << earlier.log;
    }
    const Outcome run = RunSession(relay, o, /*seed=*/17, &c.attack);
    std::printf("[attack-table] %s | %s | %s | %s\n", c.name.c_str(),
                ProtectionName(protect),
                std::string(TransportKindName(kind)).c_str(),
                run.Describe().c_str());
    std::fflush(stdout);

    // An attack that never fired proves nothing.
    ASSERT_TRUE(run.fired) << run.log;
    EXPECT_EQ(relay.fired(), 1u);
    if (protect == Protection::kNone) continue;

    SCOPED_TRACE(run.Describe() + "\n" + run.log);
    // The source never claims a round the destination did not apply.
    EXPECT_EQ(run.claimed_unapplied, -1);
    EXPECT_LE(run.source_confirmed, run.destination_applied);
    EXPECT_LE(run.rounds_done, run.destination_applied);
    const std::string where = c.attack.control
                                  ? "control"
                                  : absl::StrCat("channel ", run.event.channel);
    EXPECT_TRUE(run.destination_done) << "destination still running";
    EXPECT_LE(run.source_failed_at - run.event.when, kNoticeBound);
    for (const absl::Status& s : {run.source, run.destination}) {
      EXPECT_THAT(s.message(), ::testing::HasSubstr(where)) << s;
      EXPECT_THAT(s, RefusedFor(c.causes));
    }
    if (!c.attack.control || c.attack.kind == AttackKind::kForgeRoundDone) {
      // The round that held the tampered packet (or the confirmation) was
      // never confirmed.
      EXPECT_LE(run.rounds_done, run.event.round);
      EXPECT_LE(run.destination_applied, run.event.round);
    }
    // A sealed payload is read in place and opened there: a made-up page
    // may be in the memory of the refused session (which was never live),
    // never in one that ended well.
    EXPECT_FALSE(run.completed && run.forged_landed);
  }
}

// A lost link that carried forged bytes (the audit's A1), with
// survive_channel_loss: a packet whose header names pages its real self
// does not carry, its payload made up, cut half-way, so that its tag is
// never read and the destination takes the cut for a lost channel. The
// source re-sends the real packet's pages; nobody re-sends the forged
// ones, which were written in place. The session may end only with every
// byte the source's: the round that carried them is refused when it
// completes, before the source's commit point (audit 3, F4: refused at
// FINISH, the source called the outcome unknown and kept its workload
// paused).
// Payloads of the default size, and of 16 MiB, past what was once opened
// in a staging copy (8 MiB), where the bytes landed before any check.
class ForgedCutTest
    : public ::testing::TestWithParam<std::tuple<Protection, uint32_t, bool>> {
};

TEST_P(ForgedCutTest, NothingForgedSurvivesALostLink) {
  const auto [protect, packet_pages, dest_file] = GetParam();
  SessionOptions o = Options(TransportKind::kTcp, protect, kChannels);
  o.survive_channel_loss = true;
  o.packet_pages = packet_pages;
  o.max_packet_pages = packet_pages;
  // Payloads of 8 MiB through the relay under a sanitizer: on a machine
  // where every first touch of a page is slow (a shadow-paged guest), the
  // relay and both ends fall seconds behind and the 2 s stall timeout
  // ends the session before the attack's round (seen under TSan: both
  // ends "stalled" in round 0). What is tested is the cut, not liveness.
  if (testing::UnderSanitizer()) o.stall_timeout = absl::Seconds(15);
  const uint64_t bytes = std::max<uint64_t>(ScaledBytes(16 << 20),
                                            uint64_t{packet_pages} * 4096 * 4);
  Attack a = On(AttackKind::kForgeTruncate, 1);
  // In round 1, so every page landed once and was confirmed. The later
  // rounds rewrite only the region's second half and the forged pages lie
  // in the first: none comes again, and no other channel writes them
  // while the forged bytes land (a race the attack would cause, which
  // ThreadSanitizer reports).
  a.forged_base = 0;
  AttackRelay relay(0);
  const Outcome run =
      RunSession(relay, o, /*seed=*/23, &a, bytes, bytes / 4096 / 2, dest_file);
  std::printf("[attack-table] ForgedCut%d%s | %s | tcp | %s\n", packet_pages,
              dest_file ? "File" : "", ProtectionName(protect),
              run.Describe().c_str());
  std::fflush(stdout);
  ASSERT_TRUE(run.fired) << run.log;
  SCOPED_TRACE(run.Describe() + "\n" + run.log);
  EXPECT_EQ(run.claimed_unapplied, -1);
  EXPECT_FALSE(run.completed && run.forged_landed);
  if (run.completed) {
    EXPECT_TRUE(run.same_bytes);
    EXPECT_EQ(run.verify_mismatches, 0u);
  }
  // A sealing source cuts its packets at kMaxStagedPayloadBytes.
  const uint64_t payload = std::min<uint64_t>(uint64_t{packet_pages} * 4096,
                                              engine::kMaxStagedPayloadBytes);
  if (dest_file && payload <= engine::kMaxFilePayloadBytes) {
    // Staged and written through the file only once authentic: the cut
    // payload never landed, so the lost channel is survived like any
    // other, and the session ends byte-identical.
    EXPECT_FALSE(run.forged_landed);
    EXPECT_TRUE(run.completed) << run.source << " / " << run.destination;
    return;
  }
  // Written in place, so it could only be undone by an authentic copy
  // that never comes: the session is refused, and says why, when the
  // round that carried the forged header completes (a lost channel's own
  // packet comes again within that round), so the round is never
  // confirmed and the source fails before its commit point. (Where the
  // forged pages were being written by another channel too, that
  // channel's payload fails its tag first.)
  EXPECT_FALSE(run.completed);
  EXPECT_EQ(run.rounds_done, run.event.round);
  EXPECT_TRUE(
      SaysOneOf(run.source, {"tag never checked out", "authentication tag"}))
      << run.source;
  // A detected attack may fail the migration, never freeze it: the source
  // knows the destination did not commit, so its workload may resume
  // (audit 3, F4: the refusal came after FINISH, "the outcome is unknown",
  // and both ends kept the workload stopped).
  EXPECT_EQ(run.commit_outcome, CommitOutcome::kNotCommitted)
      << CommitOutcomeName(run.commit_outcome) << ": " << run.source;
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, ForgedCutTest,
    ::testing::Combine(::testing::Values(Protection::kMac,
                                         Protection::kEncrypt),
                       ::testing::Values(128u, 4096u),
                       ::testing::Values(false, true)),
    [](const auto& info) {
      return absl::StrCat(ProtectionName(std::get<0>(info.param)), "_",
                          std::get<1>(info.param), "pages",
                          std::get<2>(info.param) ? "_file" : "");
    });

// Review A4: the granted capabilities are in the stream keys. A relay
// strips a granted feature (zero pages) from the control connection's
// reply, which the proofs before it do not cover: the source derives its
// keys over the reply it got, the destination over the one it sent, and
// the first sealed control frame fails. Before, the source quietly ran
// without the feature and the session ended "verified".
TEST(StripGrantedTest, AGrantTakenAwayOnTheWayFailsTheSession) {
  SessionOptions o = Options(TransportKind::kTcp, Protection::kMac, 2);
  o.round_timeout = absl::Seconds(10);
  const uint64_t bytes = ScaledBytes(4 << 20);
  auto src = MakeRegion(1, bytes, 41, /*fill=*/true);
  auto dst = MakeRegion(1, bytes);
  ServingReceiver rx(o, {dst.region});
  AttackRelay relay(rx.port());
  Attack strip;
  strip.kind = AttackKind::kStripGranted;
  strip.control = true;
  strip.strip = proto::kFeatureZeroPages;
  relay.Arm(strip);
  o.port = relay.port();
  absl::Status source;
  {
    absl::StatusOr<std::unique_ptr<Sender>> sender =
        Sender::Connect(o, {&src.region, 1});
    source = sender.status();
    if (sender.ok()) {
      DirtyBitmap dirty(src.region.page_count());
      dirty.SetAll();
      DirtyBitmap* bitmaps[] = {&dirty};
      source = (*sender)->SendRound(bitmaps).status();
      if (source.ok()) source = (*sender)->Finish();
    }
  }
  EXPECT_EQ(relay.fired(), 1u) << relay.Log();
  // The destination's keys cover the reply it sent: the first sealed frame
  // the source reads, its ERROR, fails the tag under the source's keys.
  EXPECT_THAT(source, StatusIs(absl::StatusCode::kPermissionDenied,
                               ::testing::HasSubstr("authentication tag")))
      << "the source ran on a reply the relay altered";
  std::printf("[strip-granted] source: %s\n", source.ToString().c_str());
  // The destination admitted no session it could authenticate: it still
  // waits for one, and nothing landed.
  rx.receiver().Abort(absl::CancelledError("test over"));
  (void)rx.result();
  EXPECT_TRUE(testing::AllZero(dst.region));
}

// The commit point (review D4): the control connection cut at each step
// of the finish. Whatever the step, the source and the destination never
// both run the memory: before FINISH leaves, the source fails as before
// (its caller resumes) and the destination has not committed; once it has
// left, the source says the outcome is unknown (its caller keeps the
// workload paused), whether the destination committed or not.
struct FinishCut {
  const char* name;
  proto::ControlType frame;
  bool downstream, forward;
  // What the step allows: whether the destination commits (Serve OK:
  // kEither where it races the cut, as when its FINISH_ACK meets a closed
  // connection or not), and whether the source finishes (Finish OK:
  // kEither where the FINISH_ACK may cross the relay before its cut
  // lands, the cut being made after FINISH went through).
  enum Allowed { kNo, kYes, kEither } destination_commits, source_finishes;
};

class FinishCutTest : public ::testing::TestWithParam<FinishCut> {};

TEST_P(FinishCutTest, NeverTwoLiveCopies) {
  const FinishCut& step = GetParam();
  SessionOptions o = Options(TransportKind::kTcp, Protection::kMac, 2);
  o.round_timeout = absl::Seconds(10);
  const uint64_t bytes = ScaledBytes(8 << 20);
  auto src = MakeRegion(1, bytes, 31, /*fill=*/true);
  auto dst = MakeRegion(1, bytes);
  ServingReceiver rx(o, {dst.region});
  AttackRelay relay(rx.port());
  Attack cut;
  cut.kind = AttackKind::kCutAtFrame;
  cut.control = true;
  cut.frame_type = static_cast<uint32_t>(step.frame);
  cut.downstream = step.downstream;
  cut.forward = step.forward;
  relay.Arm(cut);
  o.port = relay.port();
  absl::StatusOr<std::unique_ptr<Sender>> sender =
      Sender::Connect(o, {&src.region, 1});
  ASSERT_OK(sender);
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  absl::Status source = (*sender)->SendRound(bitmaps).status();
  if (source.ok()) source = (*sender)->Finish();
  const bool finish_sent = (*sender)->finish_sent();
  sender->reset();  // its connections close: the destination ends too
  const absl::Status destination = rx.result();
  ASSERT_FALSE(relay.events().empty()) << relay.Log();
  SCOPED_TRACE(absl::StrCat("source: ", source.ToString(), "\ndestination: ",
                            destination.ToString(), "\n", relay.Log()));
  // A caller resumes its workload on a failure before the commit point.
  const bool source_resumes = !source.ok() && !finish_sent;
  EXPECT_FALSE(source_resumes && destination.ok())
      << "two live copies: the destination committed and the source would "
         "resume";
  if (step.destination_commits != FinishCut::kEither) {
    EXPECT_EQ(destination.ok(), step.destination_commits == FinishCut::kYes);
  }
  if (step.source_finishes != FinishCut::kEither) {
    EXPECT_EQ(source.ok(), step.source_finishes == FinishCut::kYes);
  }
  // A source that finished was told so by a destination that committed.
  if (source.ok()) {
    EXPECT_OK(destination);
  }
  if (!source.ok() && finish_sent) {
    EXPECT_THAT(std::string(source.message()),
                ::testing::HasSubstr("the outcome is unknown"));
  }
  if (source.ok()) {
    EXPECT_TRUE(testing::SameBytes(src.region, dst.region));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Steps, FinishCutTest,
    ::testing::Values(
        // Before the commit point: the round is never confirmed.
        FinishCut{"RoundDoneLost", proto::ControlType::kRoundDone, true, false,
                  FinishCut::kNo, FinishCut::kNo},
        FinishCut{"FinishLost", proto::ControlType::kFinish, false, false,
                  FinishCut::kNo, FinishCut::kNo},
        // Seen: the destination's FINISH_ACK came back through the relay
        // between its forwarding FINISH and closing both connections.
        FinishCut{"FinishDelivered", proto::ControlType::kFinish, false, true,
                  FinishCut::kEither, FinishCut::kEither},
        FinishCut{"FinishAckLost", proto::ControlType::kFinishAck, true, false,
                  FinishCut::kYes, FinishCut::kNo},
        FinishCut{"FinishAckDelivered", proto::ControlType::kFinishAck, true,
                  true, FinishCut::kYes, FinishCut::kYes}),
    [](const auto& info) { return std::string(info.param.name); });

std::string AttackName(
    const ::testing::TestParamInfo<std::tuple<Case, Protection>>& info) {
  return absl::StrCat(std::get<0>(info.param).name, "_",
                      ProtectionName(std::get<1>(info.param)));
}

// The tests: every attack refused on a protected stream.
INSTANTIATE_TEST_SUITE_P(
    Kinds, AttackTest,
    ::testing::Combine(::testing::ValuesIn(Cases()),
                       ::testing::Values(Protection::kMac,
                                         Protection::kEncrypt)),
    AttackName);

// The same attacks unprotected: a table of what happens ("[attack-table]"
// lines), which asserts only that each attack fired, so these count as a
// report, never as protection coverage.
INSTANTIATE_TEST_SUITE_P(
    UnprotectedReport, AttackTest,
    ::testing::Combine(::testing::ValuesIn(Cases()),
                       ::testing::Values(Protection::kNone)),
    AttackName);

}  // namespace
}  // namespace ramferry
