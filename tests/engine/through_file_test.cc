// Sessions whose regions map a file (Region::fd) on loopback, every socket
// transport: pages go through the files on both ends with every protection
// and compression, beside a workload that writes while rounds run, onto a
// destination that holds other bytes already; and a destination whose file
// cannot be written ends the session on both ends with that cause.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "channels/transport.h"
#include "channels/transport_family.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/sender.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/transport_selection.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;

using testing::FileRegion;
using ::testing::HasSubstr;
using testing::MakeFileRegion;
using testing::SameBytes;
using testing::ScaledBytes;
using testing::ServingReceiver;

SessionOptions Options(TransportKind kind, Protection protect) {
  SessionOptions o = testing::InsecureOptions();
  if (protect != Protection::kNone) {
    o.insecure = false;
    o.auth_key = "through-file-test-key-0123456789ab";
  }
  o.protect = protect;
  o.transport = kind;
  o.channels = 3;
  o.header_slots = 32;  // staging buffers rotate under a wrapping array
  return o;
}

// Rewrites `count` random pages and marks them dirty, as a live workload:
// not instrumented for TSan, like memload's writers (the engine reads
// pages being written by design).
__attribute__((no_sanitize("thread"))) void Rewrite(const Region& r,
                                                    uint64_t count,
                                                    std::mt19937_64& rng,
                                                    DirtyBitmap& dirty) {
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t p = rng() % r.page_count();
    auto* words = reinterpret_cast<volatile uint64_t*>(r.page(p));
    const uint64_t v = rng();
    for (size_t w = 0; w < r.page_size / 8; ++w) words[w] = v + w;
    dirty.Set(p);
  }
}

class ThroughFileTest
    : public ::testing::TestWithParam<
          std::tuple<TransportKind, Protection, Compression>> {};

TEST_P(ThroughFileTest, RoundsEndByteIdenticalAndVerified) {
  const auto [kind, protect, compression] = GetParam();
  if (std::string why = testing::WhyUnavailable(kind); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const uint64_t bytes = ScaledBytes(32ull << 20);
  // The source: a quarter zero, a quarter text-like, half random; the
  // files start a few pages into the memfd.
  FileRegion src = MakeFileRegion(1, bytes, /*seed=*/3, /*fill=*/true,
                                  /*lead=*/5 * 4096);
  const uint64_t pages = src.region.page_count();
  std::memset(src.region.page(0), 0, bytes / 4);
  for (uint64_t p = pages / 4; p < pages / 2; ++p) {
    std::memset(src.region.page(p), 'a' + p % 26, 2048);
  }
  // A destination that holds other bytes already: zero pages must be
  // written there, through the file.
  FileRegion dst = MakeFileRegion(1, bytes, /*seed=*/4, /*fill=*/true,
                                  /*lead=*/4096);

  SessionOptions opt = Options(kind, protect);
  opt.compression = compression;
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);

  DirtyBitmap dirty(pages);
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  std::mt19937_64 rng(11);
  for (int round = 0; round < 4; ++round) {
    // Scattered pages (through the mapping) and a long run (the file).
    if (round > 0) {
      Rewrite(src.region, pages / 50, rng, dirty);
      const uint64_t first = rng() % (pages - 64);
      for (uint64_t p = first; p < first + 64; ++p) {
        std::memset(src.region.page(p), static_cast<int>(round), 4096);
        dirty.Set(p);
      }
    }
    absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
    ASSERT_OK(r);
  }
  absl::StatusOr<VerifyReport> v = (*sender)->Verify();
  ASSERT_OK(v);
  EXPECT_TRUE(v->ok()) << v->pages_mismatched << " pages differ";
  ASSERT_OK((*sender)->Finish());
  ASSERT_OK(rx.result());
  EXPECT_TRUE(SameBytes(src.region, dst.region));

  const ChannelStats sent = (*sender)->stats().Total();
  const ChannelStats got = rx.receiver().stats().Total();
  // The destination writes every long run through its file; the source
  // reads through its file where the payload is copied anyway.
  EXPECT_GT(got.file_bytes, bytes / 4);
  EXPECT_LE(got.file_bytes, got.pages * 4096);
  const bool copies =
      (channels::StaticCapabilities(kind) & channels::kCapZeroCopy) == 0 ||
      protect != Protection::kNone;
  if (copies) {
    EXPECT_GT(sent.file_bytes, bytes / 2);
  } else {
    EXPECT_EQ(sent.file_bytes, 0u);
  }
  EXPECT_GT(sent.zero_pages, 0u);
  if (compression == Compression::kOn) {
    EXPECT_GT(sent.compressed_packets, 0u);
  }
  if (protect != Protection::kNone) {
    EXPECT_EQ(got.sealed_bytes, sent.sealed_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Transports, ThroughFileTest,
    ::testing::Combine(::testing::ValuesIn(testing::TransportsWith(
                           0, channels::kCapRemotePlacement |
                                  channels::kCapOwnsConnection)),
                       ::testing::Values(Protection::kNone, Protection::kMac,
                                         Protection::kEncrypt),
                       ::testing::Values(Compression::kOff, Compression::kOn)),
    [](const auto& info) {
      return absl::StrCat(
          testing::TestName(std::get<0>(info.param)), "_",
          ProtectionName(std::get<1>(info.param)), "_",
          std::get<2>(info.param) == Compression::kOn ? "compressed" : "plain");
    });

// Only one end has a file: each end decides for itself.
TEST(ThroughFileOneEndTest, EitherEndAloneGoesThroughItsFile) {
  for (bool source_file : {true, false}) {
    SCOPED_TRACE(source_file ? "source file" : "destination file");
    const uint64_t bytes = ScaledBytes(16ull << 20);
    FileRegion fsrc = MakeFileRegion(1, bytes, 8, true);
    FileRegion fdst = MakeFileRegion(1, bytes);
    testing::TestRegion msrc = testing::MakeRegion(1, bytes, 8, true);
    testing::TestRegion mdst = testing::MakeRegion(1, bytes);
    const Region& src = source_file ? fsrc.region : msrc.region;
    const Region& dst = source_file ? mdst.region : fdst.region;
    SessionOptions opt = Options(TransportKind::kTcp, Protection::kMac);
    ServingReceiver rx(opt, {dst});
    opt.port = rx.port();
    auto sender = Sender::Connect(opt, {&src, 1});
    ASSERT_OK(sender);
    DirtyBitmap dirty(src.page_count());
    dirty.SetAll();
    DirtyBitmap* bitmaps[] = {&dirty};
    ASSERT_OK((*sender)->SendRound(bitmaps));
    absl::StatusOr<VerifyReport> v = (*sender)->Verify();
    ASSERT_OK(v);
    EXPECT_TRUE(v->ok());
    ASSERT_OK((*sender)->Finish());
    ASSERT_OK(rx.result());
    EXPECT_TRUE(SameBytes(src, dst));
    EXPECT_EQ((*sender)->stats().Total().file_bytes > 0, source_file);
    EXPECT_EQ(rx.receiver().stats().Total().file_bytes > 0, !source_file);
  }
}

// A destination file that stops taking writes (here: its descriptor made
// read-only under the session, as an I/O error or a full tmpfs would fail
// the write) ends the session on both ends, saying so; through a mapping
// the same fault would have been a SIGBUS.
TEST(ThroughFileFaultTest, AFileWriteErrorEndsTheSessionOnBothEnds) {
  const uint64_t bytes = ScaledBytes(16ull << 20);
  FileRegion src = MakeFileRegion(1, bytes, 9, true);
  FileRegion dst = MakeFileRegion(1, bytes);
  SessionOptions opt = Options(TransportKind::kTcp, Protection::kMac);
  ServingReceiver rx(opt, {dst.region});  // checked O_RDWR here
  const std::string path = "/proc/self/fd/" + std::to_string(dst.region.fd);
  const int read_only = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(read_only, 0);
  ASSERT_EQ(dup3(read_only, dst.region.fd, O_CLOEXEC), dst.region.fd);
  close(read_only);
  opt.port = rx.port();
  auto sender = Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  absl::StatusOr<RoundResult> r = (*sender)->SendRound(bitmaps);
  ASSERT_THAT(r, StatusIs(absl::StatusCode::kInternal,
                          HasSubstr("writing region 1's file at")));
  EXPECT_THAT(r.status().message(), HasSubstr("writing region 1's file"));
  const absl::Status served = rx.result();
  EXPECT_THAT(served, StatusIs(absl::StatusCode::kInternal,
                               HasSubstr("writing region 1's file at")));
  EXPECT_THAT(served.message(), HasSubstr("writing region 1's file"));
  EXPECT_EQ((*sender)->confirmed_rounds(), 0u);
}

}  // namespace
}  // namespace ramferry
