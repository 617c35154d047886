// Which processes map a file (the --region-file check): the maps-line
// matcher on crafted lines, and a real second process mapping a file.
#include "tools/migrate/file_mappers.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::migrate {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;

TEST(MapsLineMapsFile, MatchesDeviceAndInodeAndReadsWritePermission) {
  bool writable = false;
  EXPECT_TRUE(MapsLineMapsFile(
      "7f00a000-7f00b000 rw-s 00000000 00:19 4242   /dev/shm/x", 0, 0x19, 4242,
      &writable));
  EXPECT_TRUE(writable);
  EXPECT_TRUE(MapsLineMapsFile(
      "7f00a000-7f00b000 r--s 00001000 00:19 4242   /dev/shm/x (deleted)", 0,
      0x19, 4242, &writable));
  EXPECT_FALSE(writable);
  // Another inode, another device, anonymous memory, a torn line.
  EXPECT_FALSE(MapsLineMapsFile("7f-80 rw-s 0 00:19 4243 /dev/shm/y", 0, 0x19,
                                4242, &writable));
  EXPECT_FALSE(MapsLineMapsFile("7f-80 rw-s 0 08:01 4242 /data/x", 0, 0x19,
                                4242, &writable));
  EXPECT_FALSE(MapsLineMapsFile("7f-80 rw-p 0 00:00 0", 0, 0, 0, &writable));
  EXPECT_FALSE(MapsLineMapsFile("7f-80 rw-s", 0, 0x19, 4242, &writable));
}

TEST(OtherProcessesMapping, FindsAChildThatMapsTheFileButNotThisProcess) {
  const std::string path =
      absl::StrCat("/dev/shm/ramferry-test-mappers-", getpid());
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  // This process maps it too: not reported.
  void* mine = mmap(nullptr, 1 << 20, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(mine, MAP_FAILED);
  absl::StatusOr<std::vector<FileMapper>> none = OtherProcessesMapping(path);
  ASSERT_OK(none);
  EXPECT_TRUE(none->empty()) << DescribeMappers(*none);

  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    void* p = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    (void)!write(ready[1], p == MAP_FAILED ? "n" : "y", 1);
    pause();
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, 'y');
  absl::StatusOr<std::vector<FileMapper>> found = OtherProcessesMapping(path);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  munmap(mine, 1 << 20);
  close(fd);
  close(ready[0]);
  close(ready[1]);
  unlink(path.c_str());
  ASSERT_OK(found);
  ASSERT_EQ(found->size(), 1u) << DescribeMappers(*found);
  EXPECT_EQ((*found)[0].pid, child);
  EXPECT_TRUE((*found)[0].writable);
  EXPECT_THAT(DescribeMappers(*found), HasSubstr(absl::StrCat(child, " (")));
  EXPECT_THAT(DescribeMappers(*found), HasSubstr("writable"));
  EXPECT_THAT(OtherProcessesMapping(path + ".missing"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("No such file or directory")));
}

}  // namespace
}  // namespace ramferry::migrate
