// Pages through a region's file (engine/pages/region_file.h): the descriptor is
// checked against the mapping it must back, runs go to and from the right
// file offsets, and zero pages are applied through the file.
#include "engine/pages/region_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/pages/zero_pages.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/region.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry::engine {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;
using testing::MakeFileRegion;

constexpr uint64_t kPage = 4096;

absl::Status Check(const Region& r, bool writable = true) {
  return CheckRegionFile(r, writable);
}

TEST(RegionFileTest, AMemfdMappedSharedAtItsOffsetIsAccepted) {
  testing::FileRegion f = MakeFileRegion(1, 64 * kPage, 0, false,
                                         /*lead=*/3 * kPage);
  EXPECT_OK(Check(f.region));
  EXPECT_OK(ValidateRegion(f.region));
  // No file: nothing to check.
  Region none = f.region;
  none.fd = -1;
  EXPECT_OK(Check(none));
}

TEST(RegionFileTest, ADescriptorThatDoesNotBackTheMemoryIsRefused) {
  testing::FileRegion f = MakeFileRegion(1, 16 * kPage, 0, false, 2 * kPage);
  testing::FileRegion other = MakeFileRegion(2, 64 * kPage);

  Region wrong_file = f.region;
  wrong_file.fd = other.region.fd;
  EXPECT_THAT(Check(wrong_file).message(), HasSubstr("does not back"));

  Region wrong_offset = f.region;
  wrong_offset.fd_offset = 0;
  EXPECT_THAT(Check(wrong_offset).message(), HasSubstr("does not back"));

  // Anonymous memory, and a private mapping of the right file.
  testing::TestRegion anon = testing::MakeRegion(3, 16 * kPage);
  Region anonymous = anon.region;
  anonymous.fd = f.region.fd;
  anonymous.fd_offset = 2 * kPage;
  EXPECT_THAT(Check(anonymous).message(), HasSubstr("does not back"));
  void* priv = mmap(nullptr, 16 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE,
                    f.region.fd, 2 * kPage);
  ASSERT_NE(priv, MAP_FAILED);
  Region private_map = f.region;
  private_map.base = priv;
  EXPECT_THAT(Check(private_map).message(), HasSubstr("does not back"));
  munmap(priv, 16 * kPage);

  // Memory past the mapping's end: the next mapping is not the file.
  Region longer = f.region;
  longer.length = 32 * kPage;
  EXPECT_THAT(
      Check(longer),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "leave Region::fd at -1 to move its pages through the mapping")));
  // Every failure names the region and what to do.
  EXPECT_THAT(Check(wrong_file).message(), HasSubstr("region 1"));
  EXPECT_THAT(Check(wrong_file).message(), HasSubstr("Region::fd at -1"));
}

TEST(RegionFileTest, ADescriptorOfTheWrongKindOrModeIsRefused) {
  testing::FileRegion f = MakeFileRegion(1, 16 * kPage);

  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  Region pipe_region = f.region;
  pipe_region.fd = pipe_fds[0];
  EXPECT_THAT(Check(pipe_region).message(), HasSubstr("not a regular file"));
  close(pipe_fds[0]);
  close(pipe_fds[1]);

  Region closed = f.region;
  closed.fd = 1 << 20;  // no such descriptor
  EXPECT_THAT(Check(closed).message(), HasSubstr("cannot be examined"));

  Region unaligned = f.region;
  unaligned.fd_offset = 100;
  EXPECT_THAT(Check(unaligned).message(), HasSubstr("not a multiple"));

  // Read-only is enough for a source, not for a destination.
  const std::string path = "/proc/self/fd/" + std::to_string(f.region.fd);
  const int ro = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(ro, 0);
  Region read_only = f.region;
  read_only.fd = ro;
  EXPECT_OK(Check(read_only, /*writable=*/false));
  EXPECT_THAT(Check(read_only, /*writable=*/true).message(),
              HasSubstr("not open for reading and writing"));
  close(ro);

  // A file shorter than the region.
  ASSERT_EQ(ftruncate(f.region.fd, 8 * kPage), 0);
  EXPECT_THAT(Check(f.region).message(), HasSubstr("too short"));
}

TEST(RegionFileTest, RunsGoToAndComeFromTheirFileOffsets) {
  testing::FileRegion f = MakeFileRegion(1, 32 * kPage, 0, false, kPage);
  std::vector<uint8_t> src(5 * kPage);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  // Pages 2-4 and 20-21 of the region.
  const uint64_t offsets[] = {2 * kPage, 20 * kPage};
  const iovec runs[] = {{nullptr, 3 * kPage}, {nullptr, 2 * kPage}};
  ASSERT_OK(WriteRuns(f.region, offsets, runs, src.data()));
  // The mapping sees them where they belong, and nothing else changed.
  EXPECT_EQ(std::memcmp(f.region.page(2), src.data(), 3 * kPage), 0);
  EXPECT_EQ(std::memcmp(f.region.page(20), src.data() + 3 * kPage, 2 * kPage),
            0);
  for (uint64_t p : {0u, 1u, 5u, 19u, 22u, 31u}) {
    for (uint64_t i = 0; i < kPage; ++i) ASSERT_EQ(f.region.page(p)[i], 0);
  }
  std::vector<uint8_t> back(src.size());
  ASSERT_OK(ReadRuns(f.region, offsets, runs, back.data()));
  EXPECT_EQ(back, src);
}

TEST(RegionFileTest, AnIoErrorSaysWhatAndWhere) {
  testing::FileRegion f = MakeFileRegion(7, 8 * kPage);
  Region r = f.region;
  const std::string path = "/proc/self/fd/" + std::to_string(r.fd);
  r.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(r.fd, 0);
  std::vector<uint8_t> buf(kPage);
  const uint64_t offset = 3 * kPage;
  const iovec run{nullptr, kPage};
  absl::Status s = WriteRuns(r, {&offset, 1}, {&run, 1}, buf.data());
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInternal,
                          HasSubstr("Bad file descriptor")));
  EXPECT_THAT(s.message(),
              HasSubstr("writing region 7's file at offset 12288"));
  close(r.fd);
}

TEST(RegionFileTest, ZeroPagesAreAppliedThroughTheFile) {
  // Not known to read as zero: each page is read and written only where
  // it is not zero, through the file for runs long enough.
  testing::FileRegion f = MakeFileRegion(1, 300 * kPage, 0, false, kPage);
  for (uint64_t p : {0u, 5u, 6u, 70u, 299u}) {
    std::memset(f.region.page(p), 0x5a, kPage);
  }
  f.region.page(150)[kPage - 1] = 1;  // only the last byte
  ZeroPages z({&f.region, 1});
  absl::StatusOr<ZeroPages::Applied> a = z.Zero(0, 0, 300);
  ASSERT_OK(a);
  EXPECT_EQ(a->written, 6u);
  EXPECT_EQ(a->skipped, 294u);
  EXPECT_TRUE(testing::AllZero(f.region));
  // A short run goes through the mapping, the same way.
  std::memset(f.region.page(9), 0x11, kPage);
  a = z.Zero(0, 8, 2);
  ASSERT_OK(a);
  EXPECT_EQ(a->written, 1u);
  EXPECT_TRUE(testing::AllZero(f.region));
}

TEST(RegionFileTest, OnlyLongRunsThatFitGoThroughTheFile) {
  testing::FileRegion f = MakeFileRegion(1, 16 * kPage);
  EXPECT_TRUE(ThroughFile(f.region, 1, 128, 128 * kPage));
  EXPECT_TRUE(ThroughFile(f.region, 32, 128, 128 * kPage));
  EXPECT_FALSE(ThroughFile(f.region, 33, 128, 128 * kPage));  // scattered
  EXPECT_FALSE(ThroughFile(f.region, 1, 4096, kMaxFilePayloadBytes * 2));
  Region none = f.region;
  none.fd = -1;
  EXPECT_FALSE(ThroughFile(none, 1, 128, 128 * kPage));
}

}  // namespace
}  // namespace ramferry::engine
