// Post-copy end to end on loopback: a real Sender and Receiver, the
// destination's missing pages dropped and registered with userfaultfd,
// threads on the destination faulting on them while the source pushes the
// rest; every page byte-identical and verified at the end.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ramferry/sender.h"
#include "tests/support/test_support.h"

namespace ramferry {
namespace {

using testing::MakeRegion;
using testing::SameBytes;
using testing::ServingReceiver;

// Reads pages of `dst` (faulting on the missing ones) and checks each
// against `src`, from `threads` threads, until `stop`; returns pages that
// differed. Reads race with placement by design: a missing page's first
// touch blocks until it is placed, so what it reads is final.
struct FaultingReaders {
  FaultingReaders(const Region& dst, const Region& src, int threads,
                  uint64_t seed)
      : dst_(dst), src_(src) {
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, t, seed] { Run(seed + t); });
    }
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
    while (!stop_.load()) {
      const uint64_t p = rng() % dst_.page_count();
      std::memcpy(page.data(), dst_.page(p), dst_.page_size);
      reads_.fetch_add(1);
      if (std::memcmp(page.data(), src_.page(p), dst_.page_size) != 0) {
        mismatches_.fetch_add(1);
      }
    }
  }
  const Region& dst_;
  const Region& src_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> reads_{0}, mismatches_{0};
  std::vector<std::thread> threads_;
};

class PostcopyTest
    : public ::testing::TestWithParam<std::tuple<TransportKind, bool>> {};

TEST_P(PostcopyTest, MissingPagesFaultAndArriveByteIdentical) {
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
  ASSERT_TRUE(sender.ok()) << sender.status();

  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  ASSERT_TRUE((*sender)->SendRound(bitmaps).ok());
  // A quarter of the pages change after round 0: the destination lacks
  // exactly those at the switch.
  std::mt19937_64 rng(5);
  for (uint64_t i = 0; i < src.region.page_count() / 4; ++i) {
    const uint64_t p = rng() % src.region.page_count();
    std::memset(src.region.page(p), static_cast<int>(rng() | 1), 4096);
    dirty.Set(p);
  }
  const uint64_t missing = dirty.Count();
  ASSERT_TRUE((*sender)->StartPostcopy(bitmaps).ok());
  FaultingReaders readers(dst.region, src.region, 3, 99);
  absl::Status done = (*sender)->CompletePostcopy();
  readers.Stop();
  ASSERT_TRUE(done.ok()) << done;
  EXPECT_EQ(readers.mismatches_.load(), 0u);
  EXPECT_GT(readers.reads_.load(), 0u);
  absl::StatusOr<VerifyReport> v = (*sender)->Verify();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->ok()) << v->pages_mismatched;
  ASSERT_TRUE((*sender)->Finish().ok());
  ASSERT_TRUE(rx.result().ok()) << rx.result();
  EXPECT_TRUE(SameBytes(src.region, dst.region));

  const PostcopyStats s = (*sender)->stats().postcopy;
  const PostcopyStats d = rx.receiver().stats().postcopy;
  EXPECT_TRUE(s.started);
  EXPECT_EQ(s.urgent_channel, urgent);
  EXPECT_EQ(s.missing_pages, missing);
  EXPECT_EQ(d.missing_pages, missing);
  EXPECT_GE(s.pushed_pages + s.urgent_pages, missing);
  EXPECT_EQ(d.faults, d.requested_pages);
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
  ASSERT_TRUE(sender.ok()) << sender.status();
  // Every page missing (a switch before any round), pushed at 32 MB/s:
  // the cut comes with most of them still to go.
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  (*sender)->SetMaxBandwidth(32'000'000);
  ASSERT_TRUE((*sender)->StartPostcopy(bitmaps).ok());
  FaultingReaders readers(dst.region, src.region, 2, 7);
  std::thread cut([&] {
    absl::SleepFor(absl::Milliseconds(300));
    (*sender)->Abort(absl::UnavailableError("connection cut by the test"));
  });
  absl::Status first = (*sender)->CompletePostcopy();
  cut.join();
  ASSERT_FALSE(first.ok());
  EXPECT_FALSE(rx.done()) << "the destination gave up instead of waiting";

  SessionOptions again = opt;
  again.max_bandwidth = 0;
  auto resumed = Sender::ResumePostcopy(again, {&src.region, 1}, **sender);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  absl::Status done = (*resumed)->CompletePostcopy();
  readers.Stop();
  ASSERT_TRUE(done.ok()) << done;
  EXPECT_EQ(readers.mismatches_.load(), 0u);
  absl::StatusOr<VerifyReport> v = (*resumed)->Verify();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->ok()) << v->pages_mismatched;
  ASSERT_TRUE((*resumed)->Finish().ok());
  ASSERT_TRUE(rx.result().ok()) << rx.result();
  EXPECT_TRUE(SameBytes(src.region, dst.region));
  EXPECT_EQ((*resumed)->stats().postcopy.resumes, 1u);
  EXPECT_EQ(rx.receiver().stats().postcopy.resumes, 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Transports, PostcopyTest,
    ::testing::Combine(::testing::Values(TransportKind::kTcp,
                                         TransportKind::kTcpZeroCopy,
                                         TransportKind::kUringZeroCopy),
                       ::testing::Bool()),
    [](const auto& info) {
      std::string name =
          absl::StrCat(TransportKindName(std::get<0>(info.param)),
                       std::get<1>(info.param) ? "_urgent" : "_no_urgent");
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

}  // namespace
}  // namespace ramferry
