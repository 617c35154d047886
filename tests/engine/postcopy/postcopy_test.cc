// Post-copy end to end on loopback: a real Sender and Receiver, the
// destination's missing pages dropped and registered with userfaultfd,
// threads on the destination faulting on them while the source pushes the
// rest; every page byte-identical and verified at the end.
#include "proto/postcopy.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <future>
#include <latch>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "channels/transport_family.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/options.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/faulty_transport.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/transport_selection.h"
#include "tests/support/uffd_skip.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

using testing::MakeRegion;
using testing::SameBytes;
using testing::ServingReceiver;

// Reads pages of `dst` (faulting on the missing ones) and checks each
// against `src`, from `threads` threads, until `stop`; returns pages that
// differed. Reads race with placement by design: a missing page's first
// touch blocks until it is placed, so what it reads is final. Every thread
// is running when the constructor returns and reads at least once: on a
// loaded machine a push can finish before a new thread is first scheduled
// (seen: no fault at all in 13 of 60 runs beside 6 busy threads).
struct FaultingReaders {
  // `pause`: between reads, so the faults' answers do not move the whole
  // region before a test is done with the push.
  FaultingReaders(const Region& dst, const Region& src, int threads,
                  uint64_t seed, absl::Duration pause = absl::ZeroDuration())
      : dst_(dst), src_(src), pause_(pause), started_(threads) {
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, t, seed] { Run(seed + t); });
    }
    started_.wait();
  }
  ~FaultingReaders() { Stop(); }
  void Stop() {
    stop_.store(true);
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  void Run(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<uint8_t> page(dst_.page_size);
    started_.count_down();
    do {
      const uint64_t p = rng() % dst_.page_count();
      std::memcpy(page.data(), dst_.page(p), dst_.page_size);
      reads_.fetch_add(1);
      if (std::memcmp(page.data(), src_.page(p), dst_.page_size) != 0) {
        mismatches_.fetch_add(1);
      }
      if (pause_ > absl::ZeroDuration()) absl::SleepFor(pause_);
    } while (!stop_.load());
  }
  const Region& dst_;
  const Region& src_;
  const absl::Duration pause_;
  std::latch started_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> reads_{0}, mismatches_{0};
  std::vector<std::thread> threads_;
};

// `n` threads spinning until Stop() (or the end of the scope): the cores
// stay busy, so the session's threads wait for time slices.
class BusyThreads {
 public:
  explicit BusyThreads(int n) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        volatile uint64_t x = 0;
        while (!stop_.load(std::memory_order_relaxed)) x = x + 1;
      });
    }
  }
  ~BusyThreads() { Stop(); }
  void Stop() {
    stop_.store(true);
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

class PostcopyTest
    : public ::testing::TestWithParam<std::tuple<TransportKind, bool>> {};

TEST_P(PostcopyTest, MissingPagesFaultAndArriveByteIdentical) {
  SKIP_WITHOUT_USERFAULTFD();
  const auto [kind, urgent] = GetParam();
  const uint64_t bytes = testing::ScaledBytes(64ull << 20);
  auto src = MakeRegion(1, bytes, /*seed=*/11, /*fill=*/true);
  auto dst = MakeRegion(1, bytes);
  SessionOptions opt = testing::InsecureOptions();
  opt.transport = kind;
  opt.channels = 2;
  opt.postcopy = true;
  opt.postcopy_urgent_channel = urgent;
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);

  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  ASSERT_OK((*sender)->SendRound(bitmaps));
  // A quarter of the pages change after round 0: the destination lacks
  // exactly those at the switch.
  std::mt19937_64 rng(5);
  for (uint64_t i = 0; i < src.region.page_count() / 4; ++i) {
    const uint64_t p = rng() % src.region.page_count();
    std::memset(src.region.page(p), static_cast<int>(rng() | 1), 4096);
    dirty.Set(p);
  }
  const uint64_t missing = dirty.Count();
  ASSERT_OK((*sender)->StartPostcopy(bitmaps));
  FaultingReaders readers(dst.region, src.region, 3, 99);
  absl::Status done = (*sender)->CompletePostcopy();
  readers.Stop();
  ASSERT_OK(done);
  EXPECT_EQ(readers.mismatches_.load(), 0u);
  EXPECT_GT(readers.reads_.load(), 0u);
  absl::StatusOr<VerifyReport> v = (*sender)->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok()) << v->pages_mismatched;
  ASSERT_OK((*sender)->Finish());
  ASSERT_OK(rx.result());
  EXPECT_TRUE(SameBytes(src.region, dst.region));

  const PostcopyStats s = (*sender)->stats().postcopy;
  const PostcopyStats d = rx.receiver().stats().postcopy;
  EXPECT_TRUE(s.started);
  EXPECT_EQ(s.urgent_channel, urgent);
  EXPECT_EQ(s.missing_pages, missing);
  EXPECT_EQ(d.missing_pages, missing);
  EXPECT_GE(s.pushed_pages + s.urgent_pages, missing);
  // Each timed fault is one fault message read. Not each is a request: a
  // fault whose page the push placed while the fault was being read is
  // timed but never requested (seen: 402 faults, 401 requested).
  EXPECT_LE(d.faults, d.fault_messages);
  absl::PrintF(
      "[postcopy] %s urgent=%d missing=%d pushed=%d urgent_pages=%d "
      "requested=%d faults=%d p50=%dus p99=%dus max=%dus dup=%d\n",
      TransportKindName(kind), urgent, missing, s.pushed_pages, s.urgent_pages,
      d.requested_pages, d.faults, d.latency_p50_us, d.latency_p99_us,
      d.latency_max_us, d.duplicate_pages);
}

// The source's session dies in the middle of post-copy (Abort, as a crash
// of its connections would end it); the destination keeps its workload
// paused and waits; a resumed session learns what is still missing, the
// faulting threads' requests go again, and the end is byte-identical.
TEST_P(PostcopyTest, ACutSessionIsResumedAndEndsByteIdentical) {
  SKIP_WITHOUT_USERFAULTFD();
  const auto [kind, urgent] = GetParam();
  const uint64_t bytes = testing::ScaledBytes(64ull << 20);
  auto src = MakeRegion(1, bytes, /*seed=*/13, /*fill=*/true);
  auto dst = MakeRegion(1, bytes);
  SessionOptions opt = testing::InsecureOptions();
  opt.transport = kind;
  opt.channels = 2;
  opt.postcopy = true;
  opt.postcopy_urgent_channel = urgent;
  opt.postcopy_resume_timeout = absl::Seconds(20);
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);
  // Every page missing (a switch before any round), pushed at 8 MB/s and
  // faulted at most about 2,000 pages a second: the cut comes with most of
  // them still to go, even in a sanitizer build's smaller region.
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  (*sender)->SetMaxBandwidth(8'000'000);
  ASSERT_OK((*sender)->StartPostcopy(bitmaps));
  FaultingReaders readers(dst.region, src.region, 2, 7, absl::Milliseconds(1));
  // A hypervisor's own requests go on through the cut and the resume
  // (review C1: they went to a freed control connection): each is sent or
  // kept for the resumed session, never an error or a crash.
  std::atomic<bool> requesting{true};
  std::atomic<uint64_t> requests{0}, refused{0};
  std::thread requester([&] {
    uint64_t page = 0;
    while (requesting.load()) {
      page = (page + 97) % dst.region.page_count();
      if (absl::Status s = rx.receiver().RequestPages(1, page, 1); !s.ok()) {
        refused.fetch_add(1);
        ADD_FAILURE() << s;
      }
      requests.fetch_add(1);
      absl::SleepFor(absl::Microseconds(200));
    }
  });
  std::thread cut([&] {
    absl::SleepFor(absl::Milliseconds(300));
    (*sender)->Abort(absl::UnavailableError("connection cut by the test"));
  });
  absl::Status first = (*sender)->CompletePostcopy();
  cut.join();
  ASSERT_THAT(first, StatusIs(absl::StatusCode::kUnavailable,
                              HasSubstr("connection cut by the test")))
      << "the push ended before the cut: slow it down";
  EXPECT_FALSE(rx.done()) << "the destination gave up instead of waiting: "
                          << rx.receiver().stats().postcopy.duration_ns
                          << " ns of post-copy";

  SessionOptions again = opt;
  again.max_bandwidth = 0;
  auto resumed = Sender::ResumePostcopy(again, {&src.region, 1}, **sender);
  ASSERT_OK(resumed);
  absl::Status done = (*resumed)->CompletePostcopy();
  requesting.store(false);
  requester.join();
  EXPECT_GT(requests.load(), 0u);
  EXPECT_EQ(refused.load(), 0u);
  readers.Stop();
  ASSERT_OK(done);
  EXPECT_EQ(readers.mismatches_.load(), 0u);
  absl::StatusOr<VerifyReport> v = (*resumed)->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok()) << v->pages_mismatched;
  ASSERT_OK((*resumed)->Finish());
  ASSERT_OK(rx.result());
  EXPECT_TRUE(SameBytes(src.region, dst.region));
  EXPECT_EQ((*resumed)->stats().postcopy.resumes, 1u);
  EXPECT_EQ(rx.receiver().stats().postcopy.resumes, 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Transports, PostcopyTest,
    // Post-copy places pages through the receiver: every transport that
    // passes them through it.
    ::testing::Combine(::testing::ValuesIn(testing::TransportsWith(
                           0, channels::kCapRemotePlacement)),
                       ::testing::Bool()),
    [](const auto& info) {
      return absl::StrCat(testing::TestName(std::get<0>(info.param)),
                          std::get<1>(info.param) ? "_urgent" : "_no_urgent");
    });

// ---- more shapes of a post-copy session ----

const std::string kKey = "postcopy-test-key-0123456789abcdef";

// Regions of `sizes` bytes on each side (the source's filled from `seed`),
// a receiver serving the destination's, and a connected sender, with one
// dirty bitmap per region, all set.
struct Session {
  Session(SessionOptions opt, std::vector<uint64_t> sizes, uint64_t seed) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const auto id = static_cast<uint32_t>(i + 1);
      src.push_back(MakeRegion(id, sizes[i], seed + i, /*fill=*/true));
      dst.push_back(MakeRegion(id, sizes[i]));
      src_regions.push_back(src.back().region);
      dst_regions.push_back(dst.back().region);
      dirty.push_back(
          std::make_unique<DirtyBitmap>(src.back().region.page_count()));
      dirty.back()->SetAll();
      bitmaps.push_back(dirty.back().get());
    }
    rx = std::make_unique<ServingReceiver>(opt, dst_regions);
    opt.port = rx->port();
    absl::StatusOr<std::unique_ptr<Sender>> s =
        Sender::Connect(opt, src_regions);
    connected = s.status();
    if (s.ok()) sender = *std::move(s);
  }
  ~Session() {
    // A session that failed leaves the receiver waiting for a source.
    if (rx != nullptr && !rx->done()) {
      rx->receiver().Abort(absl::CancelledError("test over"));
    }
  }
  // Writes `n` random pages of region `r` on the source and marks them.
  void Dirty(size_t r, uint64_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    const Region& reg = src[r].region;
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t p = rng() % reg.page_count();
      std::memset(reg.page(p), static_cast<int>(rng() | 1), reg.page_size);
      dirty[r]->Set(p);
    }
  }
  uint64_t Missing() const {
    uint64_t n = 0;
    for (const auto& d : dirty) n += d->Count();
    return n;
  }
  // CompletePostcopy, Verify, Finish and the receiver's result, all OK,
  // and every region byte-identical.
  void CompleteAndCheck() {
    absl::Status done = sender->CompletePostcopy();
    ASSERT_OK(done);
    absl::StatusOr<VerifyReport> v = sender->Verify();
    ASSERT_OK(v);
    EXPECT_TRUE(v->ok()) << v->pages_mismatched;
    ASSERT_OK(sender->Finish());
    ASSERT_OK(rx->result());
    for (size_t r = 0; r < src.size(); ++r) {
      EXPECT_TRUE(SameBytes(src[r].region, dst[r].region)) << "region " << r;
    }
  }

  std::vector<testing::TestRegion> src, dst;
  std::vector<Region> src_regions, dst_regions;
  std::vector<std::unique_ptr<DirtyBitmap>> dirty;
  std::vector<DirtyBitmap*> bitmaps;
  std::unique_ptr<ServingReceiver> rx;
  absl::Status connected;
  std::unique_ptr<Sender> sender;
};

SessionOptions PostcopyOptions(bool urgent = true) {
  SessionOptions opt = testing::InsecureOptions();
  opt.channels = 2;
  opt.postcopy = true;
  opt.postcopy_urgent_channel = urgent;
  return opt;
}

TEST(PostcopyShapesTest, SealedSessionsEndByteIdentical) {
  SKIP_WITHOUT_USERFAULTFD();
  for (Protection protect : {Protection::kMac, Protection::kEncrypt}) {
    for (bool urgent : {true, false}) {
      SCOPED_TRACE(absl::StrCat(ProtectionName(protect), " urgent=", urgent));
      SessionOptions opt = PostcopyOptions(urgent);
      opt.insecure = false;
      opt.auth_key = kKey;
      opt.protect = protect;
      Session s(opt, {16ull << 20}, 21);
      ASSERT_OK(s.connected);
      ASSERT_OK(s.sender->SendRound(s.bitmaps));
      s.Dirty(0, s.src[0].region.page_count() / 4, 3);
      const uint64_t missing = s.Missing();
      ASSERT_OK(s.sender->StartPostcopy(s.bitmaps));
      FaultingReaders readers(s.dst[0].region, s.src[0].region, 2, 7);
      ASSERT_NO_FATAL_FAILURE(s.CompleteAndCheck());
      readers.Stop();
      EXPECT_EQ(readers.mismatches_.load(), 0u);
      const PostcopyStats d = s.rx->receiver().stats().postcopy;
      EXPECT_TRUE(d.started);
      EXPECT_EQ(d.urgent_channel, urgent);
      EXPECT_EQ(d.missing_pages, missing);
    }
  }
}

// postcopy=now: no round before the switch, every page is missing.
TEST(PostcopyShapesTest, SwitchBeforeAnyRoundMovesEveryPage) {
  SKIP_WITHOUT_USERFAULTFD();
  for (bool urgent : {true, false}) {
    SCOPED_TRACE(absl::StrCat("urgent=", urgent));
    Session s(PostcopyOptions(urgent), {32ull << 20}, 31);
    ASSERT_OK(s.connected);
    const uint64_t pages = s.src[0].region.page_count();
    ASSERT_OK(s.sender->StartPostcopy(s.bitmaps));
    FaultingReaders readers(s.dst[0].region, s.src[0].region, 3, 17);
    ASSERT_NO_FATAL_FAILURE(s.CompleteAndCheck());
    readers.Stop();
    EXPECT_EQ(readers.mismatches_.load(), 0u);
    const PostcopyStats src = s.sender->stats().postcopy;
    const PostcopyStats dst = s.rx->receiver().stats().postcopy;
    EXPECT_EQ(src.missing_pages, pages);
    EXPECT_EQ(dst.missing_pages, pages);
    EXPECT_GE(src.pushed_pages + src.urgent_pages, pages);
    EXPECT_TRUE(s.rx->receiver().IsResident(1, 0, pages));
  }
}

TEST(PostcopyShapesTest, SeveralRegionsOfDifferentSizes) {
  SKIP_WITHOUT_USERFAULTFD();
  // 16 MiB, 4 MiB + 12 KiB (not a whole bitmap word) and 8 MiB.
  Session s(PostcopyOptions(), {16ull << 20, (4ull << 20) + 12288, 8ull << 20},
            41);
  ASSERT_OK(s.connected);
  ASSERT_OK(s.sender->SendRound(s.bitmaps));
  for (size_t r = 0; r < 3; ++r) {
    s.Dirty(r, s.src[r].region.page_count() / 3, 100 + r);
  }
  // The last page of the odd-sized region is missing too.
  const uint64_t last = s.src[1].region.page_count() - 1;
  std::memset(s.src[1].region.page(last), 0x5A, 4096);
  s.dirty[1]->Set(last);
  const uint64_t missing = s.Missing();
  ASSERT_OK(s.sender->StartPostcopy(s.bitmaps));
  std::vector<std::unique_ptr<FaultingReaders>> readers;
  for (size_t r = 0; r < 3; ++r) {
    readers.push_back(std::make_unique<FaultingReaders>(
        s.dst[r].region, s.src[r].region, 1, 50 + r));
  }
  ASSERT_NO_FATAL_FAILURE(s.CompleteAndCheck());
  for (auto& r : readers) {
    r->Stop();
    EXPECT_EQ(r->mismatches_.load(), 0u);
  }
  EXPECT_EQ(s.rx->receiver().stats().postcopy.missing_pages, missing);
  EXPECT_EQ(s.sender->stats().postcopy.missing_pages, missing);
}

TEST(PostcopyShapesTest, EmptyMissingSetCompletesAtOnce) {
  SKIP_WITHOUT_USERFAULTFD();
  for (bool urgent : {true, false}) {
    SCOPED_TRACE(absl::StrCat("urgent=", urgent));
    Session s(PostcopyOptions(urgent), {16ull << 20, 4ull << 20}, 51);
    ASSERT_OK(s.connected);
    ASSERT_OK(s.sender->SendRound(s.bitmaps));
    ASSERT_EQ(s.Missing(), 0u);
    absl::Status switched = s.sender->StartPostcopy(s.bitmaps);
    ASSERT_OK(switched);
    const absl::Time start = absl::Now();
    ASSERT_NO_FATAL_FAILURE(s.CompleteAndCheck());
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    const PostcopyStats src = s.sender->stats().postcopy;
    const PostcopyStats dst = s.rx->receiver().stats().postcopy;
    EXPECT_TRUE(dst.started);
    EXPECT_EQ(src.missing_pages, 0u);
    EXPECT_EQ(dst.missing_pages, 0u);
    EXPECT_EQ(src.pushed_pages, 0u);
    EXPECT_EQ(dst.faults, 0u);
  }
}

// Runs `n` sessions, `session(i, &end)` each, and expects every one to
// end OK (`end`): the stress tests below repeat a short session many
// times and report how many failed and the first failure, not each one.
// An ASSERT in `session` ends the test at once, as in a loop written out.
void RunSessions(int n,
                 const std::function<void(int i, absl::Status* end)>& session) {
  int failures = 0;
  std::string first_failure;
  for (int i = 0; i < n; ++i) {
    absl::Status end;
    session(i, &end);
    if (::testing::Test::HasFatalFailure()) return;
    if (!end.ok()) {
      ++failures;
      if (first_failure.empty()) first_failure = end.ToString();
    }
  }
  EXPECT_EQ(failures, 0) << "of " << n << "; first: " << first_failure;
}

// The same, many times, with busy threads competing for the cores: the
// destination's POSTCOPY_COMPLETE (sent by its completer thread as soon as
// nothing is awaited, which for an empty set is at once) must never reach
// the source before POSTCOPY_ARMED.
TEST(PostcopyShapesTest, EmptySwitchRepeatedUnderLoadArmsBeforeItCompletes) {
  SKIP_WITHOUT_USERFAULTFD();
  BusyThreads busy(3);
  const int kSessions = testing::UnderSanitizer() ? 20 : 80;
  RunSessions(kSessions, [](int i, absl::Status* end) {
    Session s(PostcopyOptions(/*urgent=*/i % 2 == 0), {1ull << 20}, 500 + i);
    ASSERT_OK(s.connected);
    ASSERT_OK(s.sender->SendRound(s.bitmaps));
    *end = s.sender->StartPostcopy(s.bitmaps);
    if (end->ok()) *end = s.sender->CompletePostcopy();
    if (end->ok()) *end = s.sender->Finish();
  });
}

// Many short post-copy sessions whose workload faults right up to the last
// page, with busy threads competing for the cores: page requests are still
// being answered on the source's urgent connection when the destination's
// POSTCOPY_COMPLETE arrives (the two travel on different connections).
// An answer the source can no longer send then is not a failure: the
// destination holds every page.
TEST(PostcopyShapesTest, RequestsInFlightAtTheEndDoNotFailTheSession) {
  SKIP_WITHOUT_USERFAULTFD();
  BusyThreads busy(2);
  const int kSessions = testing::UnderSanitizer() ? 15 : 60;
  RunSessions(kSessions, [](int i, absl::Status* end) {
    Session s(PostcopyOptions(/*urgent=*/true), {2ull << 20}, 600 + i);
    ASSERT_OK(s.connected);
    *end = s.sender->StartPostcopy(s.bitmaps);  // every page
    if (end->ok()) {
      FaultingReaders readers(s.dst[0].region, s.src[0].region, 3, i);
      *end = s.sender->CompletePostcopy();
      readers.Stop();
      EXPECT_EQ(readers.mismatches_.load(), 0u);
    }
    if (end->ok()) {
      absl::StatusOr<VerifyReport> v = s.sender->Verify();
      *end = v.ok() ? (v->ok() ? absl::OkStatus()
                               : absl::DataLossError("verify mismatched"))
                    : v.status();
    }
    if (end->ok()) *end = s.sender->Finish();
  });
}

// The most fragmented missing set: every other page, so the switch's
// ranges (one per page) outnumber what one MISSING_PAGES message carries
// (kMaxMissingRanges) and the set goes as several messages; a reader
// faults all over it meanwhile, and a RequestPages over the whole region
// asks for more pages than one PAGE_REQUEST holds.
TEST(PostcopyShapesTest, AnAlternatingMissingSetGoesAsSeveralMessages) {
  SKIP_WITHOUT_USERFAULTFD();
  const uint64_t bytes = testing::ScaledBytes(512ull << 20);
  Session s(PostcopyOptions(/*urgent=*/true), {bytes}, 71);
  ASSERT_OK(s.connected);
  ASSERT_OK(s.sender->SendRound(s.bitmaps));
  const Region& src = s.src[0].region;
  for (uint64_t p = 0; p < src.page_count(); p += 2) {
    std::memset(src.page(p), static_cast<int>(p % 251 + 1), src.page_size);
    s.dirty[0]->Set(p);
  }
  const uint64_t missing = s.Missing();
  ASSERT_OK(s.sender->StartPostcopy(s.bitmaps));
  FaultingReaders readers(s.dst[0].region, src, 2, 5);
  ASSERT_OK(s.rx->receiver().RequestPages(1, 0, s.dst[0].region.page_count()));
  ASSERT_OK(s.sender->CompletePostcopy());
  readers.Stop();
  EXPECT_EQ(readers.mismatches_.load(), 0u);
  absl::StatusOr<VerifyReport> v = s.sender->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok()) << v->pages_mismatched;
  ASSERT_OK(s.sender->Finish());
  ASSERT_OK(s.rx->result());
  EXPECT_TRUE(SameBytes(src, s.dst[0].region));
  const PostcopyStats d = s.rx->receiver().stats().postcopy;
  EXPECT_EQ(d.missing_pages, missing);
  if (!testing::UnderSanitizer()) {
    // 65,536 ranges in the release build: two messages at least.
    EXPECT_GT(missing, uint64_t{proto::kMaxMissingRanges});
    EXPECT_GT(d.requested_pages, uint64_t{proto::kMaxPageRequestPages});
  }
}

// The hypervisor's hooks: a range asked for with RequestPages becomes
// resident with no thread touching it, WaitResident returns once it is,
// and bad ranges are refused.
TEST(PostcopyShapesTest, ReceiverHooksRequestAndWaitForRanges) {
  SKIP_WITHOUT_USERFAULTFD();
  Session s(PostcopyOptions(/*urgent=*/true), {16ull << 20}, 61);
  ASSERT_OK(s.connected);
  Receiver& rx = s.rx->receiver();
  const uint64_t pages = s.src[0].region.page_count();
  // Before the switch: nothing to request.
  EXPECT_EQ(rx.RequestPages(1, 0, 1).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(s.sender->StartPostcopy(s.bitmaps));  // every page
  EXPECT_FALSE(rx.IsResident(1, 0, 1));
  EXPECT_FALSE(rx.IsResident(1, 100, 50));

  // Out of range: refused, never a crash or a wait.
  for (auto [region, first, n] :
       std::vector<std::tuple<uint32_t, uint64_t, uint64_t>>{{1, pages, 1},
                                                             {1, pages - 1, 2},
                                                             {1, 0, pages + 1},
                                                             {1, ~0ull, 2},
                                                             {1, 1, ~0ull},
                                                             {7, 0, 1}}) {
    SCOPED_TRACE(absl::StrCat(region, " ", first, " ", n));
    EXPECT_FALSE(rx.IsResident(region, first, n));
    EXPECT_EQ(rx.RequestPages(region, first, n).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(rx.WaitResident(region, first, n, absl::Now() + absl::Seconds(5))
                  .code(),
              absl::StatusCode::kInvalidArgument);
  }
  // Nothing pushes before CompletePostcopy: a wait on an unrequested range
  // runs out.
  EXPECT_EQ(
      rx.WaitResident(1, 100, 50, absl::Now() + absl::Milliseconds(50)).code(),
      absl::StatusCode::kDeadlineExceeded);

  ASSERT_OK(rx.RequestPages(1, 100, 50));
  ASSERT_OK(rx.RequestPages(1, pages - 1, 1));
  absl::Status w = rx.WaitResident(1, 100, 50, absl::Now() + absl::Seconds(20));
  ASSERT_OK(w);
  ASSERT_OK(rx.WaitResident(1, pages - 1, 1, absl::Now() + absl::Seconds(20)));
  EXPECT_TRUE(rx.IsResident(1, 100, 50));
  EXPECT_TRUE(rx.IsResident(1, pages - 1, 1));
  EXPECT_FALSE(rx.IsResident(1, 99, 1));
  EXPECT_FALSE(rx.IsResident(1, 150, 1));
  EXPECT_FALSE(rx.IsResident(1, 99, 2));
  // Placed, so reading them faults nowhere; they hold the source's bytes.
  EXPECT_EQ(std::memcmp(s.dst[0].region.page(100), s.src[0].region.page(100),
                        50 * 4096),
            0);
  // Asking again for resident pages is harmless.
  EXPECT_OK(rx.RequestPages(1, 100, 50));
  EXPECT_EQ(rx.stats().postcopy.faults, 0u) << "no thread touched a page";

  ASSERT_NO_FATAL_FAILURE(s.CompleteAndCheck());
  EXPECT_TRUE(rx.IsResident(1, 0, pages));
  EXPECT_GE(s.sender->stats().postcopy.requested_pages, 51u);
}

// The destination's workload writes pages once they faulted in; a copy of
// the same page that arrives later (the bulk push it raced with) must not
// overwrite what the workload wrote.
TEST(PostcopyShapesTest, WorkloadWritesSurviveLaterDuplicates) {
  SKIP_WITHOUT_USERFAULTFD();
  // One channel, so the first packet of the push carries pages 0..127 of
  // a region where every page is missing; that packet is held back a
  // while, during which the workload faults those pages in over the urgent
  // channel and writes them.
  SessionOptions opt = PostcopyOptions(/*urgent=*/true);
  opt.channels = 1;
  opt.packet_pages = 128;
  opt.zero_pages = false;
  testing::FaultInjector faults({.source = true,
                                 .op = testing::FaultOp::kSendPacket,
                                 .nth = ~0ull,
                                 .kind = testing::FaultKind::kDelay,
                                 .delay = absl::Seconds(1)});
  Session s(opt, {16ull << 20}, 71);
  ASSERT_OK(s.connected);
  ASSERT_OK(s.sender->StartPostcopy(s.bitmaps));
  faults.ArmAt(faults.calls(true, testing::FaultOp::kSendPacket) + 1);
  std::future<absl::Status> done = std::async(
      std::launch::async, [&] { return s.sender->CompletePostcopy(); });
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (!faults.fired() && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(faults.fired());
  // The held packet's pages, faulted in and written by "the workload".
  const Region& dst = s.dst[0].region;
  const Region& src = s.src[0].region;
  constexpr uint64_t kWritten = 64;
  for (uint64_t p = 0; p < kWritten; ++p) {
    volatile uint8_t first = dst.page(p)[0];  // faults; blocks until placed
    (void)first;
    EXPECT_EQ(std::memcmp(dst.page(p), src.page(p), 4096), 0) << p;
    std::memset(dst.page(p) + 100, 0xEE, 200);
  }
  absl::Status st = done.get();
  ASSERT_OK(st);
  const PostcopyStats d = s.rx->receiver().stats().postcopy;
  EXPECT_GT(d.duplicate_pages, 0u);
  for (uint64_t p = 0; p < kWritten; ++p) {
    const uint8_t* b = dst.page(p);
    ASSERT_TRUE(
        std::all_of(b + 100, b + 300, [](uint8_t x) { return x == 0xEE; }))
        << "page " << p << ": the workload's write was overwritten";
    ASSERT_EQ(std::memcmp(b, src.page(p), 100), 0) << p;
  }
  // Verify compares what landed (the first copy), not what the workload
  // made of it since.
  absl::StatusOr<VerifyReport> v = s.sender->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok()) << v->pages_mismatched;
  ASSERT_OK(s.sender->Finish());
  ASSERT_OK(s.rx->result());
  EXPECT_EQ(std::memcmp(dst.page(kWritten), src.page(kWritten),
                        dst.length - kWritten * 4096),
            0);
  absl::PrintF("[postcopy] duplicates=%d urgent=%d\n", d.duplicate_pages,
               d.urgent_pages);
}

// The last awaited page placed by an urgent answer while a bulk copy of it
// is still on the wire: the destination completes post-copy (unregisters
// its regions) and then the bulk copy lands. It is a duplicate like any
// other and must be dropped; the session completes.
TEST(PostcopyShapesTest, DuplicateArrivingAfterTheLastPageIsDropped) {
  SKIP_WITHOUT_USERFAULTFD();
  SessionOptions opt = PostcopyOptions(/*urgent=*/true);
  opt.channels = 1;
  opt.packet_pages = 128;
  opt.zero_pages = false;
  testing::FaultInjector faults({.source = true,
                                 .op = testing::FaultOp::kSendPacket,
                                 .nth = ~0ull,
                                 .kind = testing::FaultKind::kDelay,
                                 .delay = absl::Milliseconds(500)});
  Session s(opt, {4ull << 20}, 72);
  ASSERT_OK(s.connected);
  ASSERT_OK(s.sender->SendRound(s.bitmaps));
  // Only pages 0..63 are missing: the push is one packet, held back.
  constexpr uint64_t kMissing = 64;
  for (uint64_t p = 0; p < kMissing; ++p) {
    std::memset(s.src[0].region.page(p), 0x30 + static_cast<int>(p % 7), 4096);
    s.dirty[0]->Set(p);
  }
  ASSERT_OK(s.sender->StartPostcopy(s.bitmaps));
  faults.ArmAt(faults.calls(true, testing::FaultOp::kSendPacket) + 1);
  std::future<absl::Status> done = std::async(
      std::launch::async, [&] { return s.sender->CompletePostcopy(); });
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (!faults.fired() && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(faults.fired());
  // Every missing page faults in over the urgent channel before the held
  // packet lands: the destination completes with that packet in flight.
  for (uint64_t p = 0; p < kMissing; ++p) {
    volatile uint8_t first = s.dst[0].region.page(p)[0];
    (void)first;
  }
  absl::Status st = done.get();
  EXPECT_OK(st);
  EXPECT_EQ(s.rx->receiver().stats().postcopy.duplicate_pages, kMissing);
  if (!st.ok()) return;
  absl::StatusOr<VerifyReport> v = s.sender->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok()) << v->pages_mismatched;
  ASSERT_OK(s.sender->Finish());
  ASSERT_OK(s.rx->result());
  EXPECT_TRUE(SameBytes(s.src[0].region, s.dst[0].region));
}

// A destination region that is not private anonymous memory (a shared
// memfd mapping) cannot take post-copy: refused at Listen, before any
// source comes, saying so; and memory remapped shared after Listen is
// refused when the source connects.
TEST(PostcopyRefusalTest, SharedDestinationRegionIsRefusedUpFrontAndAtConnect) {
  const uint64_t bytes = 4ull << 20;
  int fd = static_cast<int>(syscall(SYS_memfd_create, "pc-shared", 0));
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(base, MAP_FAILED);
  Region region;
  region.id = 1;
  region.base = base;
  region.length = bytes;
  auto src = MakeRegion(1, bytes, 81, /*fill=*/true);
  auto remap_shared = [&] {
    return mmap(base, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                0) == base;
  };
  {
    SessionOptions opt = PostcopyOptions();
    ServingReceiver rx(opt, {region});  // anonymous at Listen
    ASSERT_TRUE(remap_shared());
    opt.port = rx.port();
    absl::StatusOr<std::unique_ptr<Sender>> sender =
        Sender::Connect(opt, {&src.region, 1});
    ASSERT_THAT(sender,
                StatusIs(absl::StatusCode::kUnimplemented,
                         HasSubstr("destination cannot run post-copy")));
    EXPECT_THAT(std::string(sender.status().message()), HasSubstr("post-copy"));
    EXPECT_THAT(std::string(sender.status().message()), HasSubstr("shared"));
    rx.receiver().Abort(absl::CancelledError("test over"));
    (void)rx.result();
  }
  absl::StatusOr<std::unique_ptr<Receiver>> listening =
      Receiver::Listen(PostcopyOptions(), {&region, 1});
  ASSERT_THAT(listening, StatusIs(absl::StatusCode::kUnimplemented,
                                  HasSubstr("is a shared mapping")));
  EXPECT_THAT(std::string(listening.status().message()), HasSubstr("shared"));
  munmap(base, bytes);
  close(fd);
}

TEST(PostcopyRefusalTest, ValidateOptionsRefusesWhatPostcopyCannotDo) {
  SessionOptions ok = PostcopyOptions();
  EXPECT_OK(ValidateOptions(ok));
  struct Case {
    const char* name;
    std::function<void(SessionOptions&)> edit;
  };
  for (const Case& c : std::vector<Case>{
           {"rdma",
            [](SessionOptions& o) { o.transport = TransportKind::kRdma; }},
           {"survive",
            [](SessionOptions& o) { o.survive_channel_loss = true; }},
           {"verify sent",
            [](SessionOptions& o) { o.verify = VerifyMode::kSent; }},
           {"verify reread",
            [](SessionOptions& o) { o.verify = VerifyMode::kReread; }}}) {
    SCOPED_TRACE(c.name);
    SessionOptions o = PostcopyOptions();
    c.edit(o);
    absl::Status s = ValidateOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("postcopy"));
    // The same options without post-copy are fine (the refusal is post-
    // copy's), and a Sender refuses them before it dials.
    o.postcopy = false;
    if (o.transport != TransportKind::kRdma) {
      EXPECT_OK(ValidateOptions(o));
    }
    o.postcopy = true;
    o.port = 1;
    o.connect_timeout = absl::Milliseconds(100);
    absl::StatusOr<std::unique_ptr<Sender>> sender = Sender::Connect(o, {});
    EXPECT_THAT(sender, StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("postcopy")));
  }
}

TEST(PostcopyRefusalTest, SourceWithPostcopyAgainstDestinationWithout) {
  SessionOptions dst_opt = testing::InsecureOptions();  // postcopy off
  auto src = MakeRegion(1, 4ull << 20, 91, /*fill=*/true);
  auto dst = MakeRegion(1, 4ull << 20);
  ServingReceiver rx(dst_opt, {dst.region});
  SessionOptions opt = PostcopyOptions();
  opt.port = rx.port();
  absl::StatusOr<std::unique_ptr<Sender>> sender =
      Sender::Connect(opt, {&src.region, 1});
  ASSERT_THAT(sender,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("the destination does not allow post-copy")));
  EXPECT_EQ(sender.status().code(), absl::StatusCode::kFailedPrecondition)
      << sender.status();
  EXPECT_THAT(std::string(sender.status().message()),
              HasSubstr("does not allow post-copy"));
  rx.receiver().Abort(absl::CancelledError("test over"));
  (void)rx.result();
  EXPECT_TRUE(testing::AllZero(dst.region)) << "a refused source wrote nothing";
}

// The API's bad input: clear errors, never a crash or a hang.
TEST(PostcopyRefusalTest, ApiMisuseGetsClearErrors) {
  SKIP_WITHOUT_USERFAULTFD();
  {
    // A session without post-copy.
    testing::LoopbackPair pair(4ull << 20, 3);
    ASSERT_NE(pair.sender, nullptr);
    DirtyBitmap d(pair.src.region.page_count());
    DirtyBitmap* b[] = {&d};
    EXPECT_EQ(pair.sender->StartPostcopy(b).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(pair.sender->CompletePostcopy().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(pair.rx->receiver().RequestPages(1, 0, 1).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_OK(pair.rx->receiver().ReleasePostcopy());
    ASSERT_OK(pair.SendEverything());
    ASSERT_OK(pair.sender->Finish());
    ASSERT_OK(pair.rx->result());
  }
  Session s(PostcopyOptions(), {4ull << 20, 4ull << 20}, 99);
  ASSERT_OK(s.connected);
  EXPECT_EQ(s.sender->CompletePostcopy().code(),
            absl::StatusCode::kFailedPrecondition);
  // One bitmap for two regions; a bitmap of the wrong size; a null one.
  EXPECT_EQ(s.sender->StartPostcopy({s.bitmaps.data(), 1}).code(),
            absl::StatusCode::kInvalidArgument);
  DirtyBitmap wrong(17);
  DirtyBitmap* bad[] = {s.bitmaps[0], &wrong};
  EXPECT_EQ(s.sender->StartPostcopy(bad).code(),
            absl::StatusCode::kInvalidArgument);
  DirtyBitmap* null[] = {s.bitmaps[0], nullptr};
  EXPECT_EQ(s.sender->StartPostcopy(null).code(),
            absl::StatusCode::kInvalidArgument);
  // The refusals changed nothing: the real switch still works, once.
  ASSERT_OK(s.sender->StartPostcopy(s.bitmaps));
  EXPECT_EQ(s.sender->StartPostcopy(s.bitmaps).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_NO_FATAL_FAILURE(s.CompleteAndCheck());
}

// Receiver::IsResident says "false for a range outside the region" in any
// session: a caller asking about a range that does not exist must not be
// told it is resident, whether or not the session negotiated post-copy.
TEST(PostcopyRefusalTest, IsResidentOfARangeOutsideTheRegionIsFalse) {
  testing::LoopbackPair pair(4ull << 20, 3);  // no post-copy
  ASSERT_NE(pair.sender, nullptr);
  Receiver& rx = pair.rx->receiver();
  const uint64_t pages = pair.dst.region.page_count();
  EXPECT_TRUE(rx.IsResident(1, 0, pages));
  EXPECT_FALSE(rx.IsResident(1, pages, 1));
  EXPECT_FALSE(rx.IsResident(1, 0, pages + 1));
  EXPECT_FALSE(rx.IsResident(7, 0, 1)) << "no region 7";
  ASSERT_OK(pair.SendEverything());
  ASSERT_OK(pair.sender->Finish());
  ASSERT_OK(pair.rx->result());
}

}  // namespace
}  // namespace ramferry
