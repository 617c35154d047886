// Which mappings a post-copy destination accepts, on /proc/self/maps text:
// private anonymous memory, whole; shared files and hugetlbfs refused with
// a reason that names the mapping and what to use instead.
#include "engine/postcopy/postcopy_memory.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::engine {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;

constexpr char kMaps[] =
    "7f0000000000-7f0000010000 rw-p 00000000 00:00 0 \n"
    "7f0000010000-7f0000020000 rw-p 00000000 00:00 0                  "
    "[anon:ram]\n"
    "7f0000030000-7f0000040000 rw-s 00000000 00:1a 1234               "
    "/dev/shm/guest\n"
    "7f0000040000-7f0000050000 rw-p 00000000 00:10 99                 "
    "/anon_hugepage (deleted)\n"
    "7f0000050000-7f0000060000 rw-s 00000000 00:01 77                 "
    "/dev/zero (deleted)\n";

absl::Status Check(uint64_t begin, uint64_t end) {
  return CheckPostcopyMappings(kMaps, begin, end, 3);
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(PostcopyMemoryTest, AcceptsPrivateAnonymousAcrossMappings) {
  EXPECT_OK(Check(0x7f0000000000, 0x7f0000020000));
  EXPECT_OK(Check(0x7f0000008000, 0x7f0000009000));
}

TEST(PostcopyMemoryTest, RefusesASharedFileNamingMinorMode) {
  absl::Status s = Check(0x7f0000030000, 0x7f0000031000);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(s), HasSubstr("region 3"));
  EXPECT_THAT(Message(s), HasSubstr("/dev/shm/guest"));
  EXPECT_THAT(Message(s), HasSubstr("MINOR"));
  EXPECT_THAT(Message(s), HasSubstr("UFFDIO_CONTINUE"));
  // MAP_SHARED|MAP_ANONYMOUS is shmem too.
  EXPECT_THAT(Message(Check(0x7f0000050000, 0x7f0000051000)),
              HasSubstr("MINOR"));
}

TEST(PostcopyMemoryTest, RefusesHugetlbfs) {
  absl::Status s = Check(0x7f0000040000, 0x7f0000041000);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(s), HasSubstr("/anon_hugepage"));
  EXPECT_THAT(Message(s), HasSubstr("MAP_PRIVATE|MAP_ANONYMOUS"));
}

TEST(PostcopyMemoryTest, RefusesGapsAndRangesPartlyOutside) {
  // Good memory, then the unmapped hole at 0x7f0000020000.
  absl::Status s = Check(0x7f0000018000, 0x7f0000028000);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("0x7f0000020000"));
  EXPECT_THAT(Message(s), HasSubstr("not mapped"));
  // Past the last mapping.
  EXPECT_THAT(Check(0x7f0000060000, 0x7f0000061000),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the region must be mapped whole")));
  // Over a hole and a shared file: the first obstacle is the one named.
  EXPECT_THAT(Message(Check(0x7f0000000000, 0x7f0000040000)),
              HasSubstr("not mapped"));
}

TEST(PostcopyMemoryTest, RefusesUnparsableMaps) {
  absl::Status s = CheckPostcopyMappings("garbage\n", 0x1000, 0x2000, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace ramferry::engine
