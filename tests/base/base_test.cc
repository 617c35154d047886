// base/: the one errno mapping every room uses, the zero-page test the
// senders run, the descriptor owner, the clocks, the counters and the
// enum name tables.
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/counters.h"
#include "base/errno_status.h"
#include "base/named_enum.h"
#include "base/owned_fd.h"
#include "base/zero_page.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::base {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;

TEST(ErrnoStatusTest, TheCodeFitsTheErrno) {
  EXPECT_TRUE(absl::IsUnavailable(ErrnoStatus(ECONNRESET, "x")));
  EXPECT_TRUE(absl::IsUnavailable(ErrnoStatus(EPIPE, "x")));
  EXPECT_TRUE(absl::IsDeadlineExceeded(ErrnoStatus(ETIMEDOUT, "x")));
  EXPECT_TRUE(absl::IsDeadlineExceeded(ErrnoStatus(EAGAIN, "x")));
  EXPECT_TRUE(absl::IsResourceExhausted(ErrnoStatus(ENOMEM, "x")));
  EXPECT_TRUE(absl::IsInvalidArgument(ErrnoStatus(EINVAL, "x")));
  EXPECT_TRUE(absl::IsPermissionDenied(ErrnoStatus(EPERM, "x")));
  EXPECT_TRUE(absl::IsInternal(ErrnoStatus(EIO, "x")));
}

TEST(ErrnoStatusTest, TheMessageSaysWhatWasDoneAndTheErrno) {
  absl::Status s = ErrnoStatus(ENOENT, "open /nowhere");
  EXPECT_THAT(s.message(), HasSubstr("open /nowhere: "));
  EXPECT_THAT(s.message(), HasSubstr("No such file or directory"));
  EXPECT_THAT(s.message(), HasSubstr("(errno 2)"));
  EXPECT_EQ(ErrnoMessage(ENOENT, "open /nowhere"), s.message());
}

// Every length, with one nonzero byte at each place it can be: the block
// loop and the tail both look at every byte.
TEST(IsAllZeroTest, FindsANonzeroByteAnywhere) {
  std::vector<uint8_t> buf(4096 + 64, 0);
  for (size_t len : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65},
                     size_t{4095}, size_t{4096}, size_t{4160}}) {
    EXPECT_TRUE(IsAllZero(buf.data(), len)) << len;
    for (size_t at = 0; at < len; ++at) {
      buf[at] = 0x80;
      ASSERT_FALSE(IsAllZero(buf.data(), len)) << len << " at " << at;
      buf[at] = 0;
    }
  }
}

TEST(OwnedFdTest, ClosesOnceWhateverHoldsIt) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[1]);
  {
    OwnedFd a(fds[0]);
    OwnedFd b(std::move(a));
    EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(b.get(), fds[0]);
    OwnedFd c;
    c = std::move(b);
    EXPECT_NE(fcntl(fds[0], F_GETFD), -1) << "closed while still owned";
  }
  EXPECT_EQ(fcntl(fds[0], F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(OwnedFdTest, ReleaseHandsTheDescriptorOver) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[1]);
  int kept;
  {
    OwnedFd a(fds[0]);
    kept = a.Release();
  }
  EXPECT_EQ(fcntl(kept, F_GETFD), 0);
  close(kept);
}

TEST(ClockTest, MonotonicAndThreadCpuTimeMoveForward) {
  const uint64_t t0 = MonotonicNs();
  const uint64_t c0 = ThreadCpuNs();
  volatile uint64_t spin = 0;
  while (ThreadCpuNs() - c0 < 1000000) spin = spin + 1;
  EXPECT_GE(MonotonicNs() - t0, 1000000u);
}

TEST(CounterTest, AddsAndRaises) {
  Counter c;
  c.Add();
  c.Add(4);
  EXPECT_EQ(c.get(), 5u);
  c.RaiseTo(3);
  EXPECT_EQ(c.get(), 5u);
  c.RaiseTo(9);
  EXPECT_EQ(c.get(), 9u);
}

enum class Color { kRed, kGreen, kBlue };
constexpr EnumName<Color> kColorNames[] = {
    {Color::kRed, "red"},
    {Color::kGreen, "green", "the safe one"},
    {Color::kBlue, "blue"},
    {Color::kRed, "crimson", "", /*alias=*/true},
};

TEST(NamedEnumTest, EveryNameParsesBackToItsValue) {
  for (Color c : {Color::kRed, Color::kGreen, Color::kBlue}) {
    absl::StatusOr<Color> parsed =
        ParseName(kColorNames, "color", NameOf(kColorNames, c));
    ASSERT_OK(parsed);
    EXPECT_EQ(*parsed, c);
  }
}

TEST(NamedEnumTest, AnAliasParsesButIsNeitherPrintedNorOffered) {
  absl::StatusOr<Color> parsed = ParseName(kColorNames, "color", "crimson");
  ASSERT_OK(parsed);
  EXPECT_EQ(*parsed, Color::kRed);
  EXPECT_STREQ(NameOf(kColorNames, Color::kRed), "red");
  absl::StatusOr<Color> bad = ParseName(kColorNames, "color", "mauve");
  ASSERT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_EQ(bad.status().message(),
            "unknown color 'mauve'; choose one of: red, green (the safe "
            "one), blue");
}

TEST(NamedEnumTest, MatchingIsExactAndAnUnlistedValueIsUnknown) {
  EXPECT_THAT(
      ParseName(kColorNames, "color", "Red"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown color")));
  EXPECT_THAT(
      ParseName(kColorNames, "color", "red "),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown color")));
  EXPECT_THAT(
      ParseName(kColorNames, "color", ""),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown color")));
  EXPECT_STREQ(NameOf(kColorNames, static_cast<Color>(7)), "unknown");
  EXPECT_THAT(
      ParseName(kColorNames, "color", "unknown"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown color")));
}

}  // namespace
}  // namespace ramferry::base
