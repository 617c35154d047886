// Injected faults, for every transport that runs here: a real Sender and
// Receiver on loopback whose data channels are wrapped by the fault
// injector (tests/support/faulty_transport.h), which faults the Nth call
// of one operation on one side: an error, a short write or read, a
// delay, a shutdown or a reset of the real connection. Each case runs a
// three-round session and checks the outcome:
//
//   - a benign fault (a delay under the stall timeout, a write the kernel
//     would take in parts): the session completes, byte-identical;
//   - any other: both ends end with an error that names the channel and
//     the cause, within a bound, no hang; the source's confirmed_rounds()
//     equals the rounds the destination applied and confirmed, which is
//     exactly the rounds before the one the fault hit; and every round
//     the destination confirmed is there byte for byte (no bytes lost).
//
// Calls are counted across a side's channels (see FaultInjector), and the
// rounds have a fixed shape, so the Nth call of a counted operation falls
// in a known round. Submit and Poll depend on timing (a batch, an idle
// moment): their cases take call numbers every session reaches and check
// the outcome without predicting the round.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/conformance/conformance_support.h"
#include "tests/support/faulty_transport.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry::conformance {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::AnyOf;
using testing::FaultInjector;
using testing::FaultKind;
using testing::FaultOp;
using testing::FaultPlan;
using ::testing::HasSubstr;
using testing::MakeRegion;
using ::testing::MatchesRegex;
using testing::SameBytes;
using testing::ServingReceiver;

constexpr uint64_t kBytes = 1 << 20;  // 256 pages
constexpr uint32_t kPacketPages = 16;
constexpr uint32_t kChannels = 2;
constexpr int kRounds = 3;
constexpr absl::Duration kStall = absl::Seconds(2);
// From the fault to both ends having returned: a clean failure takes the
// root-cause grace (500 ms) at most; the stall timeout bounds a side that
// must notice a silent peer.
constexpr absl::Duration kEndBound = absl::Seconds(6);
// A session still running after this has hung.
constexpr absl::Duration kHang = absl::Seconds(30);

// Where in the session the faulted call falls.
enum class At {
  kFirst,        // the side's first call of the operation (round 0)
  kMidRound0,    // half-way through round 0's calls
  kRound1First,  // the first call of round 1 (round 0 is confirmed)
  kLast,         // the last call of the session (finish, or round 2)
  kFixed,        // Submit/Poll: a fixed call number, round unpredictable
};

struct FaultCase {
  TransportKind transport;
  FaultOp op;
  FaultKind kind;
  At at;
  uint64_t fixed_nth = 0;  // kFixed
};

bool SourceOp(FaultOp op) {
  return op != FaultOp::kReadExact && op != FaultOp::kReadPayload;
}

std::string AtName(const FaultCase& c) {
  switch (c.at) {
    case At::kFirst:
      return "first";
    case At::kMidRound0:
      return "mid0";
    case At::kRound1First:
      return "round1";
    case At::kLast:
      return "last";
    case At::kFixed:
      return absl::StrCat("n", c.fixed_nth);
  }
  return "?";
}

std::string CaseName(const FaultCase& c) {
  return absl::StrCat(TestName(c.transport), "_",
                      SourceOp(c.op) ? "src_" : "dst_",
                      testing::FaultOpName(c.op), "_", AtName(c), "_",
                      testing::FaultKindName(c.kind));
}

// The matrix: every operation with an error at several points; the
// faults that act on the connection (short, shutdown, reset) and the
// benign ones where the operation moves bytes.
std::vector<FaultCase> AllCases() {
  struct Row {
    FaultOp op;
    FaultKind kind;
    std::vector<At> at;
    std::vector<uint64_t> fixed = {};
  };
  using K = FaultKind;
  using O = FaultOp;
  const std::vector<Row> rows = {
      {O::kSendPacket,
       K::kError,
       {At::kFirst, At::kMidRound0, At::kRound1First, At::kLast}},
      {O::kSendPacket, K::kShortThenFail, {At::kMidRound0, At::kLast}},
      {O::kSendPacket,
       K::kShortContinue,
       {At::kFirst, At::kMidRound0, At::kLast}},
      {O::kSendPacket, K::kDelay, {At::kMidRound0}},
      {O::kSendPacket, K::kShutdown, {At::kMidRound0, At::kRound1First}},
      {O::kSendPacket, K::kReset, {At::kMidRound0, At::kRound1First}},
      {O::kAcquireHeader, K::kError, {At::kFirst, At::kRound1First}},
      {O::kFlush, K::kError, {At::kFirst, At::kRound1First, At::kLast}},
      {O::kFlush, K::kDelay, {At::kFirst}},
      {O::kFlush, K::kReset, {At::kRound1First}},
      {O::kSubmit, K::kError, {At::kFixed}, {1, 2 * kChannels}},
      {O::kSubmit, K::kDelay, {At::kFixed}, {1}},
      // A channel polls whenever its ring runs dry: at least once a round
      // after its SYNC, so every session reaches call 2 * kChannels.
      {O::kPoll, K::kError, {At::kFixed}, {1, 2 * kChannels}},
      {O::kPoll, K::kReset, {At::kFixed}, {2 * kChannels}},
      {O::kReadExact,
       K::kError,
       {At::kFirst, At::kMidRound0, At::kRound1First, At::kLast}},
      {O::kReadExact, K::kShortThenFail, {At::kMidRound0}},
      {O::kReadExact, K::kDelay, {At::kMidRound0}},
      {O::kReadExact, K::kShutdown, {At::kMidRound0, At::kRound1First}},
      {O::kReadExact, K::kReset, {At::kMidRound0, At::kRound1First, At::kLast}},
      {O::kReadPayload,
       K::kError,
       {At::kFirst, At::kMidRound0, At::kRound1First}},
      {O::kReadPayload, K::kShortThenFail, {At::kMidRound0, At::kRound1First}},
      {O::kReadPayload, K::kDelay, {At::kMidRound0}},
      {O::kReadPayload, K::kReset, {At::kMidRound0}},
  };
  std::vector<FaultCase> cases;
  for (TransportKind t : kAllTransports) {
    for (const Row& row : rows) {
      // rdma moves messages, not a byte stream: a packet in two pieces
      // is two packets there.
      if (t == TransportKind::kRdma && row.kind == K::kShortContinue) continue;
      for (At at : row.at) {
        if (at == At::kFixed) {
          for (uint64_t n : row.fixed)
            cases.push_back({t, row.op, row.kind, at, n});
        } else {
          cases.push_back({t, row.op, row.kind, at});
        }
      }
    }
  }
  return cases;
}

// The session's fixed rounds: round 0 every page, round 1 the first 64
// pages, round 2 every 8th page; later rounds rewrite their pages first.
DirtyBitmap RoundPages(int round, uint64_t pages) {
  DirtyBitmap d(pages);
  if (round == 0) {
    d.SetAll();
  } else if (round == 1) {
    d.SetRange(0, 64);
  } else {
    for (uint64_t p = 0; p < pages; p += 8) d.Set(p);
  }
  return d;
}

// Calls of `op` a side makes in each phase of the session: rounds 0..2,
// then finish (Verify moves nothing on the data channels).
std::vector<uint64_t> CallsPerPhase(FaultOp op, uint64_t pages) {
  std::vector<uint64_t> calls;
  for (int r = 0; r <= kRounds; ++r) {
    const uint64_t packets =
        r < kRounds ? PlanRound(RoundPages(r, pages), kPacketPages).packets : 0;
    const bool finish = r == kRounds;
    switch (op) {
      case FaultOp::kSendPacket:
      case FaultOp::kAcquireHeader:
        calls.push_back(packets + kChannels);  // + each channel's marker
        break;
      case FaultOp::kFlush:  // before SYNC; before and after FINISH
        calls.push_back(finish ? 2 * kChannels : kChannels);
        break;
      case FaultOp::kReadExact:  // header, offsets; a marker's header
        calls.push_back(2 * packets + kChannels);
        break;
      case FaultOp::kReadPayload:
        calls.push_back(packets);
        break;
      default:
        calls.push_back(0);
    }
  }
  while (calls.back() == 0) calls.pop_back();
  return calls;
}

// The call to fault, and the rounds confirmed before it (-1: unknown).
std::pair<uint64_t, int> Resolve(const FaultCase& c, uint64_t pages) {
  if (c.at == At::kFixed) return {c.fixed_nth, -1};
  const std::vector<uint64_t> phase = CallsPerPhase(c.op, pages);
  switch (c.at) {
    case At::kFirst:
      return {1, 0};
    case At::kMidRound0:
      return {std::max<uint64_t>(1, phase[0] / 2), 0};
    case At::kRound1First:
      return {phase[0] + 1, 1};
    default: {
      uint64_t total = 0;
      for (uint64_t n : phase) total += n;
      return {total, static_cast<int>(phase.size()) - 1};
    }
  }
}

// Aborts both ends if the session outlives kHang, so a hang fails the
// test instead of stalling the suite.
class Watchdog {
 public:
  Watchdog(std::function<void()> on_hang) : on_hang_(std::move(on_hang)) {
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(kHang),
                        [&] { return done_; })) {
        fired_ = true;
        lock.unlock();
        on_hang_();
      }
    });
  }
  ~Watchdog() { Stop(); }
  // Whether it had to abort.
  bool Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    return fired_;
  }

 private:
  std::function<void()> on_hang_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool fired_ = false;
  std::thread thread_;
};

class FaultInjectionConformance : public ::testing::TestWithParam<FaultCase> {};

TEST_P(FaultInjectionConformance, BothEndsEndCleanlyOrTheSessionCompletes) {
  const FaultCase& c = GetParam();
  if (std::string why = WhyUnavailable(c.transport); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const uint64_t pages = kBytes / 4096;
  auto [nth, confirmed_before] = Resolve(c, pages);
  FaultPlan plan{
      .source = SourceOp(c.op), .op = c.op, .nth = nth, .kind = c.kind};
  const bool benign = testing::IsBenign(c.kind);
  SCOPED_TRACE(testing::FaultPlanName(plan));

  SessionOptions opt = ::ramferry::testing::InsecureOptions();
  opt.transport = c.transport;
  UseTransportHost(opt);
  opt.channels = kChannels;
  opt.packet_pages = kPacketPages;
  opt.header_slots = 8;  // the header array wraps
  // CallsPerPhase counts ReadExact calls: whether a header announces the
  // next depends on whether the next command was queued yet (timing), so
  // the counted stream is the unannounced one. The destination still reads
  // each payload and the next fixed header together
  // (ReadPayloadAndHeader), so that path is in the matrix.
  opt.announce_next_header = false;
  opt.stall_timeout = kStall;
  opt.round_timeout = absl::Seconds(5);
  opt.connect_timeout = absl::Seconds(5);
  opt.handshake_timeout = absl::Seconds(5);

  // Declared first: the wrapped transports report to it until the end.
  FaultInjector faults(plan);
  auto src = MakeRegion(1, kBytes, 808, /*fill=*/true);
  auto dst = MakeRegion(1, kBytes);
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);
  Watchdog watchdog([&] {
    (*sender)->Abort(absl::DeadlineExceededError("test watchdog: hang"));
    rx.receiver().Abort(absl::DeadlineExceededError("test watchdog: hang"));
  });

  absl::Status source = absl::OkStatus();
  int rounds_done = 0;
  std::mt19937_64 rng(909);
  for (int r = 0; r < kRounds && source.ok(); ++r) {
    DirtyBitmap dirty = RoundPages(r, pages);
    if (r > 0) {
      for (uint64_t p = 0; p < pages; ++p) {
        if (!dirty.Test(p)) continue;
        auto* words = reinterpret_cast<uint64_t*>(src.region.page(p));
        for (uint64_t w = 0; w < 4096 / 8; ++w) words[w] = rng();
      }
    }
    DirtyBitmap* bitmaps[] = {&dirty};
    absl::StatusOr<RoundResult> result = (*sender)->SendRound(bitmaps);
    source = result.status();
    if (!source.ok()) break;
    ++rounds_done;
    // A confirmed round is at the destination, every byte of it.
    EXPECT_TRUE(SameBytes(src.region, dst.region))
        << "round " << r << " confirmed but the destination differs";
  }
  if (source.ok()) {
    absl::StatusOr<VerifyReport> v = (*sender)->Verify();
    source = v.status();
    if (v.ok()) {
      EXPECT_TRUE(v->ok()) << v->pages_mismatched << " mismatched";
    }
  }
  if (source.ok()) source = (*sender)->Finish();
  const absl::Time source_end = absl::Now();
  const absl::Status dest = rx.result();
  const absl::Time dest_end = absl::Now();
  ASSERT_FALSE(watchdog.Stop()) << "hang: the session outlived " << kHang;

  const uint64_t confirmed = (*sender)->confirmed_rounds();
  const uint64_t applied = rx.receiver().applied_rounds();
  std::printf(
      "FAULT-CASE %s fired=%d outcome=%s confirmed=%d\n  source: %s\n"
      "  dest:   %s\n",
      CaseName(c).c_str(), faults.fired(),
      source.ok() && dest.ok() ? "completed" : "error",
      static_cast<int>(confirmed), source.ToString().c_str(),
      dest.ToString().c_str());

  ASSERT_TRUE(faults.fired()) << "the session never made call " << nth << " of "
                              << testing::FaultOpName(c.op);
  // The source knows exactly what the destination confirmed. A round may
  // be confirmed while its SendRound is already failing (the failure
  // reached the caller first): confirmed_rounds() still counts it, and the
  // error says so.
  EXPECT_EQ(confirmed, applied);
  EXPECT_GE(confirmed, static_cast<uint64_t>(rounds_done));
  EXPECT_LE(confirmed, static_cast<uint64_t>(rounds_done) + 1);
  if (benign) {
    EXPECT_OK(source);
    EXPECT_OK(dest);
    EXPECT_EQ(confirmed, static_cast<uint64_t>(kRounds));
    EXPECT_TRUE(SameBytes(src.region, dst.region));
    return;
  }
  // Clear errors, with the cause: the injected one (which the other end
  // hears from this one), or the connection gone under the transport.
  ::testing::Matcher<absl::Status> source_ends, dest_ends;
  switch (c.kind) {
    case FaultKind::kError:
      source_ends = dest_ends =
          StatusIs(absl::StatusCode::kInternal, HasSubstr("injected fault"));
      break;
    case FaultKind::kShortThenFail:
      source_ends =
          StatusIs(absl::StatusCode::kInternal, HasSubstr("injected fault"));
      // The destination may see the half packet for itself before the
      // source's report arrives (rdma keeps message boundaries).
      dest_ends = AnyOf(
          source_ends,
          StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("truncated")));
      break;
    default: {
      // Each end says so. rdma, with no socket to cut, shuts its queue
      // pair down, and its peer reads the CM's DISCONNECTED event: the end
      // that shut it reports its channel shut down (ABORTED), and the
      // other end hears that from it.
      ::testing::Matcher<absl::StatusCode> lost =
          absl::StatusCode::kUnavailable;
      if (c.transport == TransportKind::kRdma) {
        lost =
            AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kAborted);
      }
      source_ends = dest_ends = StatusIs(
          lost, AnyOf(HasSubstr("reset"), HasSubstr("closed"),
                      HasSubstr("Broken pipe"), HasSubstr("not connected"),
                      HasSubstr("shut down"), HasSubstr("peer disconnected")));
    }
  }
  ASSERT_THAT(source, source_ends) << "the source completed despite the fault";
  ASSERT_THAT(dest, dest_ends) << "the destination completed despite the fault";
  if (confirmed_before >= 0) {
    if (c.kind == FaultKind::kShutdown && !plan.source) {
      // The destination shut its own socket: the bytes already in its
      // receive queue are still read, so a round may yet complete.
      EXPECT_GE(confirmed, static_cast<uint64_t>(confirmed_before));
    } else {
      EXPECT_EQ(confirmed, static_cast<uint64_t>(confirmed_before));
    }
  }
  EXPECT_LE(source_end - faults.fired_at(), kEndBound);
  EXPECT_LE(dest_end - faults.fired_at(), kEndBound);
  // The channel, and (source) the rounds the destination confirmed.
  const std::string sm(source.message());
  const std::string dm(dest.message());
  const std::string channel = absl::StrCat("channel ", faults.fired_channel());
  EXPECT_THAT(sm, HasSubstr(channel));
  EXPECT_THAT(dm, HasSubstr(channel));
  EXPECT_THAT(sm, HasSubstr(absl::StrFormat("[destination confirmed %d round",
                                            confirmed)));
  // The session is over: nothing more goes through, for the same reason.
  DirtyBitmap all(pages);
  all.SetAll();
  DirtyBitmap* bitmaps[] = {&all};
  EXPECT_THAT((*sender)->SendRound(bitmaps).status(), source_ends);
  EXPECT_THAT((*sender)->Finish(), source_ends);
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultInjectionConformance,
                         ::testing::ValuesIn(AllCases()),
                         [](const auto& info) { return CaseName(info.param); });

}  // namespace
}  // namespace ramferry::conformance
