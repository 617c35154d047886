// The /proc/<pid>/maps and smaps parser and reader every room shares.
#include "base/proc_maps.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::base {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ParseMapsLine, AnonymousWithTrailingPadding) {
  std::optional<MapsEntry> e =
      ParseMapsLine("7f1c2a000000-7f1c2a040000 rw-p 00000000 00:00 0 \n");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->start, 0x7f1c2a000000u);
  EXPECT_EQ(e->end, 0x7f1c2a040000u);
  EXPECT_TRUE(e->writable);
  EXPECT_FALSE(e->shared);
  EXPECT_EQ(e->offset, 0u);
  EXPECT_EQ(e->inode, 0u);
  EXPECT_EQ(e->path, "");
  EXPECT_EQ(ClassifyVma(*e), VmaKind::kPrivateAnonymous);
}

TEST(ParseMapsLine, AnonymousWithoutAnyTrailingSpace) {
  std::optional<MapsEntry> e =
      ParseMapsLine("00400000-00452000 rw-p 00000000 00:00 0");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->start, 0x400000u);
  EXPECT_EQ(e->path, "");
}

TEST(ParseMapsLine, FileWithSpacesAndDeleted) {
  std::optional<MapsEntry> e = ParseMapsLine(
      "7f0000001000-7f0000003000 rw-s 0000a000 fd:01 1234567                  "
      "  /tmp/my data file (deleted)");
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->shared);
  EXPECT_EQ(e->offset, 0xa000u);
  EXPECT_EQ(e->dev_major, 0xfdu);
  EXPECT_EQ(e->dev_minor, 0x01u);
  EXPECT_EQ(e->inode, 1234567u);
  EXPECT_EQ(e->path, "/tmp/my data file (deleted)");
  EXPECT_EQ(ClassifyVma(*e), VmaKind::kSharedFile);
}

TEST(ParseMapsLine, SharedAnonymousIsShmem) {
  std::optional<MapsEntry> e = ParseMapsLine(
      "7f5d9c200000-7f5d9c600000 rw-s 00000000 00:01 3072  "
      "/dev/zero (deleted)");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->dev_minor, 1u);
  EXPECT_EQ(ClassifyVma(*e), VmaKind::kSharedFile);
}

TEST(ParseMapsLine, WideDeviceNumbersAndHighAddresses) {
  std::optional<MapsEntry> e = ParseMapsLine(
      "ffffffffff600000-ffffffffff601000 --xp 00000000 103:02 0  "
      "[vsyscall]");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->start, 0xffffffffff600000u);
  EXPECT_EQ(e->dev_major, 0x103u);
  EXPECT_EQ(e->path, "[vsyscall]");
}

TEST(ParseMapsLine, RejectsMalformedLines) {
  EXPECT_FALSE(ParseMapsLine("").has_value());
  EXPECT_FALSE(ParseMapsLine("garbage").has_value());
  EXPECT_FALSE(ParseMapsLine("1000-2000 rw-p 0 00:00").has_value());
  EXPECT_FALSE(ParseMapsLine("1000-2000 rw-x 0 00:00 0").has_value());
  EXPECT_FALSE(ParseMapsLine("1000-2000 rw-pp 0 00:00 0").has_value());
  EXPECT_FALSE(ParseMapsLine("2000-1000 rw-p 0 00:00 0").has_value());
  EXPECT_FALSE(ParseMapsLine("1000-2000 rw-p 0 00:00 12x").has_value());
  EXPECT_FALSE(ParseMapsLine("0x1000-2000 rw-p 0 00:00 0").has_value());
  EXPECT_FALSE(ParseMapsLine("1000-2000 rw-p 0 0000 0").has_value());
}

MapsEntry Entry(bool shared, uint64_t inode, std::string path,
                uint32_t major = 0, uint32_t minor = 0) {
  MapsEntry e;
  e.start = 0x1000;
  e.end = 0x2000;
  e.shared = shared;
  e.inode = inode;
  e.dev_major = major;
  e.dev_minor = minor;
  e.path = std::move(path);
  return e;
}

TEST(ClassifyVma, AnonymousNames) {
  for (const char* name :
       {"", "[heap]", "[stack]", "[stack:1234]", "[anon:ramferry region]"}) {
    EXPECT_EQ(ClassifyVma(Entry(false, 0, name)), VmaKind::kPrivateAnonymous)
        << name;
  }
}

TEST(ClassifyVma, SpecialAndFileMappingsAreNotAnonymous) {
  for (const char* name :
       {"[vdso]", "[vvar]", "[vvar_vclock]", "[vsyscall]", "[uprobes]"}) {
    EXPECT_EQ(ClassifyVma(Entry(false, 0, name)), VmaKind::kOther) << name;
  }
  // A private file mapping: an absent page reads the file.
  EXPECT_EQ(ClassifyVma(Entry(false, 77, "/usr/lib/libc.so.6", 0xfd, 1)),
            VmaKind::kOther);
  EXPECT_EQ(ClassifyVma(Entry(false, 77, "/memfd:x (deleted)", 0, 1)),
            VmaKind::kOther);
  // MAP_PRIVATE|MAP_HUGETLB anonymous memory is a hugetlbfs file.
  EXPECT_EQ(ClassifyVma(Entry(false, 9, "/anon_hugepage (deleted)", 0, 0xf)),
            VmaKind::kOther);
  EXPECT_EQ(ClassifyVma(Entry(true, 0, "")), VmaKind::kOther);
  EXPECT_EQ(ClassifyVma(Entry(true, 5, "/memfd:x (deleted)", 0, 1)),
            VmaKind::kSharedFile);
}

// Each mapping with its smaps VmFlags; the other attribute lines are
// skipped.
TEST(ForEachMapping, SmapsAttributesBelongToTheMappingAbove) {
  constexpr char kSmaps[] =
      "1000-3000 rw-p 00000000 00:00 0 \n"
      "Size:                  8 kB\n"
      "THPeligible:    0\n"
      "VmFlags: rd wr mr mw me ac sd uw \n"
      "5000-6000 r--s 00002000 fd:01 42                         /dev/shm/x\n"
      "Size:                  4 kB\n"
      "VmFlags: rd sh mr mw me ms sd\n";
  std::vector<MapsEntry> seen;
  ASSERT_OK(ForEachMapping(kSmaps, MapsFile::kSmaps, "smaps",
                           [&](const MapsEntry& e) {
                             seen.push_back(e);
                             return true;
                           }));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].start, 0x1000u);
  EXPECT_EQ(seen[0].end, 0x3000u);
  EXPECT_EQ(seen[0].vm_flags, " rd wr mr mw me ac sd uw  ");
  EXPECT_EQ(seen[1].path, "/dev/shm/x");
  EXPECT_TRUE(seen[0].writable);
  EXPECT_FALSE(seen[1].writable);  // r--s
  EXPECT_EQ(seen[1].offset, 0x2000u);
  EXPECT_EQ(seen[1].vm_flags.find(" uw "), std::string::npos);
  EXPECT_NE(seen[1].vm_flags.find(" sh "), std::string::npos);
}

TEST(ForEachMapping, MapsLinesHaveNoFlagsAndStopWhenAsked) {
  constexpr char kMaps[] =
      "1000-2000 rw-p 00000000 00:00 0\n"
      "2000-3000 rw-p 00000000 00:00 0\n"
      "3000-4000 rw-p 00000000 00:00 0\n";
  std::vector<uint64_t> starts;
  ASSERT_OK(
      ForEachMapping(kMaps, MapsFile::kMaps, "maps", [&](const MapsEntry& e) {
        EXPECT_THAT(e.vm_flags, IsEmpty());
        starts.push_back(e.start);
        return e.start < 0x2000;
      }));
  EXPECT_THAT(starts, ElementsAre(0x1000u, 0x2000u));
}

// A line of neither form is an error that names it, never a skipped
// mapping: the same text an attribute line would be, before any mapping,
// included.
TEST(ForEachMapping, ALineOfNeitherFormIsAnErrorNamingIt) {
  const auto nothing = [](const MapsEntry&) { return true; };
  EXPECT_THAT(ForEachMapping("1000-2000 rw-p 0 00:00 0\ngarbage\n",
                             MapsFile::kMaps, "/proc/self/maps", nothing),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("unexpected line in /proc/self/maps: "
                                 "\"garbage\"")));
  EXPECT_THAT(
      ForEachMapping("Size: 4 kB\n", MapsFile::kSmaps, "smaps", nothing),
      StatusIs(absl::StatusCode::kInternal, HasSubstr("Size: 4 kB")));
  EXPECT_THAT(ForEachMapping("1000-2000 rw-p 0 00:00 0\n: x\n",
                             MapsFile::kSmaps, "smaps", nothing),
              StatusIs(absl::StatusCode::kInternal, HasSubstr(": x")));
  EXPECT_OK(ForEachMapping("", MapsFile::kMaps, "maps", nothing));
  // An smaps attribute line in a maps file is not its format either.
  EXPECT_THAT(ForEachMapping("1000-2000 rw-p 0 00:00 0\nSize: 4 kB\n",
                             MapsFile::kMaps, "maps", nothing),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("Size: 4 kB")));
  // A maps line goes to `fn` as soon as it is read: a caller that stops
  // there never meets a bad line after it.
  EXPECT_OK(ForEachMapping("1000-2000 rw-p 0 00:00 0\ngarbage\n",
                           MapsFile::kMaps, "maps",
                           [](const MapsEntry&) { return false; }));
}

// This process's own maps, read whole, list a mapping just made.
TEST(ReadProcFile, ThisProcessesMapsListAFreshMapping) {
  const size_t length = 3 * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  absl::StatusOr<std::string> maps = ReadProcFile("/proc/self/maps");
  ASSERT_OK(maps);
  const auto begin = reinterpret_cast<uint64_t>(p);
  bool found = false;
  ASSERT_OK(ForEachMapping(
      *maps, MapsFile::kMaps, "/proc/self/maps", [&](const MapsEntry& e) {
        found |= e.start <= begin && begin + length <= e.end &&
                 ClassifyVma(e) == VmaKind::kPrivateAnonymous;
        return true;
      }));
  EXPECT_TRUE(found);
  munmap(p, length);
  EXPECT_THAT(ReadProcFile("/proc/self/no-such-file"),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("open /proc/self/no-such-file: No such "
                                 "file or directory")));
}

}  // namespace
}  // namespace ramferry::base
