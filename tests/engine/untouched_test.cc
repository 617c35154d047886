#include "engine/untouched.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/pagemap_scan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21  // Linux 5.4
#endif

namespace ramferry::engine {
using base::kPageIsHuge;
using base::kPageIsPfnZero;
using base::kPageIsPresent;
using base::kPageIsSwapped;
using base::kPageIsWpAllowed;
using base::kPageIsWritten;
using base::kPagemapScan;
using base::PageRegion;
using base::PmScanArg;

// Found by gtest through ADL, so beside ByteRange, not in the unnamed
// namespace.
void PrintTo(const ByteRange& r, std::ostream* os) {
  *os << "[" << r.offset << ", " << r.end() << ")";
}

namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr uint64_t kPage = 4096;
constexpr uint64_t kHuge = 2 << 20;

// ---- Pure logic ----

TEST(AnonymousPieceReadsZero, ByCategories) {
  EXPECT_TRUE(AnonymousPieceReadsZero(0));
  EXPECT_TRUE(AnonymousPieceReadsZero(kPageIsWritten));
  EXPECT_TRUE(AnonymousPieceReadsZero(kPageIsWpAllowed));
  EXPECT_TRUE(AnonymousPieceReadsZero(kPageIsPresent | kPageIsPfnZero));
  EXPECT_TRUE(AnonymousPieceReadsZero(kPageIsPresent | kPageIsPfnZero |
                                      kPageIsHuge | kPageIsWritten));
  EXPECT_FALSE(AnonymousPieceReadsZero(kPageIsPresent));
  EXPECT_FALSE(AnonymousPieceReadsZero(kPageIsPresent | kPageIsHuge));
  EXPECT_FALSE(AnonymousPieceReadsZero(kPageIsSwapped));
  EXPECT_FALSE(AnonymousPieceReadsZero(kPageIsSwapped | kPageIsWritten));
  EXPECT_FALSE(AnonymousPieceReadsZero(kPageIsSwapped | kPageIsPfnZero));
}

TEST(AlignInward, Cases) {
  EXPECT_EQ(AlignInward({0, 8192}, 4096), (ByteRange{0, 8192}));
  EXPECT_EQ(AlignInward({1, 8192}, 4096), (ByteRange{4096, 4096}));
  EXPECT_EQ(AlignInward({4095, 4098}, 4096), (ByteRange{4096, 4096}));
  EXPECT_EQ(AlignInward({4096, 4095}, 4096).length, 0u);
  EXPECT_EQ(AlignInward({100, 200}, 4096).length, 0u);
  EXPECT_EQ(AlignInward({0, 0}, 4096).length, 0u);
  EXPECT_EQ(AlignInward({kPage, kHuge}, kHuge).length, 0u);
}

TEST(ToPageRanges, EmptyInput) {
  EXPECT_THAT(ToPageRanges({}, 4096), IsEmpty());
  std::vector<ByteRange> zero_length = {{4096, 0}, {0, 0}};
  EXPECT_THAT(ToPageRanges(zero_length, 4096), IsEmpty());
}

TEST(ToPageRanges, AdjacentAndOverlappingMergeInAnyOrder) {
  std::vector<ByteRange> pieces = {
      {3 * kPage, kPage},  {0, kPage},
      {kPage, 2 * kPage},  {2 * kPage, kPage},  // overlaps the one before
      {10 * kPage, kPage}, {11 * kPage, kPage}};
  EXPECT_THAT(
      ToPageRanges(pieces, kPage),
      ElementsAre(ByteRange{0, 4 * kPage}, ByteRange{10 * kPage, 2 * kPage}));
}

TEST(ToPageRanges, HugePageWithOneDataPieceIsLeftOut) {
  // Three 2 MiB pages, every 4 KiB piece untouched but one in page 1.
  std::vector<ByteRange> pieces;
  const uint64_t data_piece = kHuge + 37 * kPage;
  for (uint64_t off = 0; off < 3 * kHuge; off += kPage) {
    if (off != data_piece) pieces.push_back({off, kPage});
  }
  EXPECT_THAT(ToPageRanges(pieces, kHuge),
              ElementsAre(ByteRange{0, kHuge}, ByteRange{2 * kHuge, kHuge}));
  // The same at 4 KiB: only that piece is missing.
  EXPECT_THAT(ToPageRanges(pieces, kPage),
              ElementsAre(ByteRange{0, data_piece},
                          ByteRange{data_piece + kPage,
                                    3 * kHuge - data_piece - kPage}));
}

TEST(ToPageRanges, UnalignedPiecesKeepOnlyWholePages) {
  // A hole that ends at an unaligned EOF, then one that starts mid-page.
  std::vector<ByteRange> pieces = {{0, 5000}, {9000, 10000}};
  EXPECT_THAT(ToPageRanges(pieces, kPage),
              ElementsAre(ByteRange{0, kPage}, ByteRange{3 * kPage, kPage}));
  // Smaller tracking pages than the host's.
  EXPECT_THAT(ToPageRanges(pieces, 512),
              ElementsAre(ByteRange{0, 4608}, ByteRange{9216, 9728}));
}

// ---- Against the real kernel ----

// An mmap'd range, unmapped at the end of the test.
class Mapping {
 public:
  Mapping(uint64_t length, int prot, int flags, int fd = -1, off_t offset = 0) {
    void* p = mmap(nullptr, length, prot, flags, fd, offset);
    if (p != MAP_FAILED) {
      data_ = static_cast<uint8_t*>(p);
      length_ = length;
    }
  }
  static Mapping Anonymous(uint64_t length) {
    return Mapping(length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
  }
  Mapping(Mapping&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), length_(o.length_) {}
  ~Mapping() {
    if (data_ != nullptr) munmap(data_, length_);
  }
  uint8_t* data() const { return data_; }
  uint8_t* page(uint64_t i) const { return data_ + i * kPage; }
  bool ok() const { return data_ != nullptr; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t length_ = 0;
};

Region RegionAt(void* base, uint64_t length, uint32_t page_size = kPage) {
  Region r;
  r.id = 7;
  r.name = "untouched";
  r.base = base;
  r.length = length;
  r.page_size = page_size;
  return r;
}

std::vector<ByteRange> Find(const Region& r) {
  absl::StatusOr<std::vector<ByteRange>> got = FindUntouchedRanges(r);
  EXPECT_OK(got);
  return got.ok() ? *got : std::vector<ByteRange>{};
}

// The ranges of [0, pages) minus the pages in `data`, in 4 KiB pages.
std::vector<ByteRange> Complement(uint64_t pages, std::set<uint64_t> data) {
  std::vector<ByteRange> out;
  uint64_t run = 0;
  for (uint64_t p = 0; p <= pages; ++p) {
    if (p == pages || data.count(p) != 0) {
      if (p > run) out.push_back({run * kPage, (p - run) * kPage});
      run = p + 1;
    }
  }
  return out;
}

// This process's pagemap entry for the page at `addr` (bit 63 present,
// bit 62 swapped), read directly, not through the code under test.
uint64_t PagemapEntry(const void* addr) {
  int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  uint64_t entry = 0;
  const off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(addr) /
                                      kPage * sizeof entry);
  if (pread(fd, &entry, sizeof entry, at) != sizeof entry) entry = 0;
  close(fd);
  return entry;
}
bool Present(const void* addr) { return PagemapEntry(addr) >> 63 & 1; }
bool Swapped(const void* addr) { return PagemapEntry(addr) >> 62 & 1; }

bool PagemapScanWorks() {
  int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  static uint64_t probe_page[kPage / 8] __attribute__((aligned(4096)));
  PageRegion vec[1];
  PmScanArg a{};
  a.size = sizeof a;
  a.start = reinterpret_cast<uint64_t>(probe_page);
  a.end = a.start + kPage;
  a.vec = reinterpret_cast<uint64_t>(vec);
  a.vec_len = 1;
  a.return_mask = kPageIsPresent;
  int n = ioctl(fd, kPagemapScan, &a);
  close(fd);
  return n >= 0;
}

constexpr const char* kNoScan =
    "this kernel has no PAGEMAP_SCAN (Linux 6.7+): anonymous memory is "
    "never reported there, by design";
constexpr const char* kNoZeroPage =
    "this kernel maps a fresh page, not the shared zero page, on a read "
    "fault of private anonymous memory, so read pages cannot read as "
    "untouched here";

TEST(FindUntouchedRanges, RejectsAnInvalidRegion) {
  Region r = RegionAt(nullptr, kPage);
  absl::StatusOr<std::vector<ByteRange>> got = FindUntouchedRanges(r);
  EXPECT_THAT(
      got, StatusIs(absl::StatusCode::kInvalidArgument,
                    HasSubstr("region 7 base (nil) is not 4096-byte aligned")));
  EXPECT_THAT(std::string(got.status().message()),
              ::testing::HasSubstr("untouched"));
}

// 1.
TEST(FindUntouchedRanges, FreshAnonymousMemoryIsTheComplementOfWrites) {
  if (!PagemapScanWorks()) GTEST_SKIP() << kNoScan;
  Mapping m = Mapping::Anonymous(64 * kPage);
  ASSERT_OK(m);
  madvise(m.data(), 64 * kPage, MADV_NOHUGEPAGE);  // pages stay 4 KiB
  EXPECT_THAT(Find(RegionAt(m.data(), 64 * kPage)),
              ElementsAre(ByteRange{0, 64 * kPage}));
  for (uint64_t p : {3, 10, 11, 12, 63}) *m.page(p) = 1;
  EXPECT_EQ(Find(RegionAt(m.data(), 64 * kPage)),
            Complement(64, {3, 10, 11, 12, 63}));
}

TEST(FindUntouchedRanges, ScanFaultsNothingIn) {
  if (!PagemapScanWorks()) GTEST_SKIP() << kNoScan;
  Mapping m = Mapping::Anonymous(16 * kPage);
  ASSERT_OK(m);
  Find(RegionAt(m.data(), 16 * kPage));
  for (uint64_t p = 0; p < 16; ++p) EXPECT_FALSE(Present(m.page(p))) << p;
}

// 2.
TEST(FindUntouchedRanges, ReadFaultedAnonymousPagesAreOnTheZeroPage) {
  if (!PagemapScanWorks()) GTEST_SKIP() << kNoScan;
  if (!testing::ReadFaultsMapTheZeroPage()) GTEST_SKIP() << kNoZeroPage;
  Mapping m = Mapping::Anonymous(32 * kPage);
  ASSERT_OK(m);
  madvise(m.data(), 32 * kPage, MADV_NOHUGEPAGE);
  uint64_t sum = 0;
  for (uint64_t p = 0; p < 8; ++p) {
    sum += *static_cast<volatile uint8_t*>(m.page(p));
  }
  EXPECT_EQ(sum, 0u);
  ASSERT_EQ(madvise(m.page(16), 8 * kPage, MADV_POPULATE_READ), 0)
      << strerror(errno);
  for (uint64_t p : {0, 7, 16, 23}) EXPECT_TRUE(Present(m.page(p))) << p;
  // Written after the read fault: now its own page.
  *m.page(5) = 1;
  *m.page(20) = 1;
  EXPECT_EQ(Find(RegionAt(m.data(), 32 * kPage)), Complement(32, {5, 20}));
}

// The first swap device /proc/swaps lists, if any.
bool HasSwap(std::string& device) {
  std::ifstream swaps("/proc/swaps");
  std::string header;
  std::getline(swaps, header);
  return std::getline(swaps, device) && !device.empty();
}

// 3.
TEST(FindUntouchedRanges, SwappedOutPageIsNotReported) {
  if (!PagemapScanWorks()) GTEST_SKIP() << kNoScan;
  std::string device;
  if (!HasSwap(device)) {
    GTEST_SKIP() << "no swap device in /proc/swaps: MADV_PAGEOUT cannot "
                    "swap a page out here";
  }
  Mapping m = Mapping::Anonymous(8 * kPage);
  ASSERT_OK(m);
  madvise(m.data(), 8 * kPage, MADV_NOHUGEPAGE);
  memset(m.page(2), 0x5a, kPage);
  if (madvise(m.page(2), kPage, MADV_PAGEOUT) != 0 || !Swapped(m.page(2))) {
    GTEST_SKIP() << "MADV_PAGEOUT did not swap the page out (" << device << ")";
  }
  EXPECT_EQ(Find(RegionAt(m.data(), 8 * kPage)), Complement(8, {2}));
  EXPECT_EQ(*m.page(2), 0x5a);
}

// A file of `pages` 4 KiB pages, all holes.
int SparseFile(int fd, uint64_t pages) {
  if (fd >= 0 && ftruncate(fd, static_cast<off_t>(pages * kPage)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void PwritePage(int fd, uint64_t page) {
  const char byte = 1;
  ASSERT_EQ(pwrite(fd, &byte, 1, static_cast<off_t>(page * kPage + 100)), 1);
}

// Writes through the mapping (pages 1, 7), with pwrite (20, 21) and with
// write (30), then checks exactly the holes are reported.
void CheckSharedFile(int fd) {
  Mapping m(64 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
  ASSERT_OK(m) << strerror(errno);
  EXPECT_THAT(Find(RegionAt(m.data(), 64 * kPage)),
              ElementsAre(ByteRange{0, 64 * kPage}));
  *m.page(1) = 1;
  *m.page(7) = 1;
  PwritePage(fd, 20);
  PwritePage(fd, 21);
  ASSERT_EQ(lseek(fd, 30 * kPage, SEEK_SET), static_cast<off_t>(30 * kPage));
  ASSERT_EQ(write(fd, "x", 1), 1);
  // What PAGEMAP_SCAN alone would get wrong: data not in our page tables.
  EXPECT_FALSE(Present(m.page(20)));
  EXPECT_FALSE(Present(m.page(30)));
  EXPECT_EQ(Find(RegionAt(m.data(), 64 * kPage)),
            Complement(64, {1, 7, 20, 21, 30}));
}

// 4.
TEST(FindUntouchedRanges, SharedMemfdReportsItsHoles) {
  int fd = SparseFile(memfd_create("ramferry-untouched", MFD_CLOEXEC), 64);
  ASSERT_GE(fd, 0) << strerror(errno);
  CheckSharedFile(fd);
  close(fd);
}

TEST(FindUntouchedRanges, SharedDevShmFileReportsItsHoles) {
  char path[] = "/dev/shm/ramferry-untouched-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) GTEST_SKIP() << "no /dev/shm here: " << strerror(errno);
  unlink(path);
  fd = SparseFile(fd, 64);
  ASSERT_GE(fd, 0) << strerror(errno);
  CheckSharedFile(fd);
  close(fd);
}

TEST(FindUntouchedRanges, SharedAnonymousMemoryIsShmem) {
  Mapping m(64 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS);
  ASSERT_OK(m);
  EXPECT_THAT(Find(RegionAt(m.data(), 64 * kPage)),
              ElementsAre(ByteRange{0, 64 * kPage}));
  *m.page(0) = 1;
  *m.page(40) = 1;
  EXPECT_EQ(Find(RegionAt(m.data(), 64 * kPage)), Complement(64, {0, 40}));
}

TEST(FindUntouchedRanges, SharedFileMappedAtAnOffset) {
  int fd = SparseFile(memfd_create("ramferry-untouched", MFD_CLOEXEC), 64);
  ASSERT_GE(fd, 0) << strerror(errno);
  PwritePage(fd, 10);  // before the mapping
  PwritePage(fd, 20);  // page 4 of the mapping
  Mapping m(32 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 16 * kPage);
  ASSERT_OK(m) << strerror(errno);
  // A region that starts inside the mapping.
  EXPECT_EQ(Find(RegionAt(m.page(2), 30 * kPage)), Complement(30, {2}));
  close(fd);
}

TEST(FindUntouchedRanges, SharedPagesPastEndOfFileAreNotReported) {
  // Mapped 64 pages, file of 60: touching pages 60..63 raises SIGBUS.
  int fd = SparseFile(memfd_create("ramferry-untouched", MFD_CLOEXEC), 60);
  ASSERT_GE(fd, 0) << strerror(errno);
  Mapping m(64 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
  ASSERT_OK(m) << strerror(errno);
  *m.page(2) = 1;
  EXPECT_THAT(
      Find(RegionAt(m.data(), 64 * kPage)),
      ElementsAre(ByteRange{0, 2 * kPage}, ByteRange{3 * kPage, 57 * kPage}));
  close(fd);
}

// Swapped-out shmem is in neither our page tables nor the page cache, yet
// it is data: SEEK_DATA must still see it.
TEST(FindUntouchedRanges, SwappedOutShmemIsNotReported) {
  std::string swap_device;
  if (!HasSwap(swap_device)) {
    GTEST_SKIP() << "no swap device in /proc/swaps: shmem cannot be swapped "
                    "out here";
  }
  int fd = SparseFile(memfd_create("ramferry-untouched", MFD_CLOEXEC), 8);
  ASSERT_GE(fd, 0) << strerror(errno);
  Mapping m(8 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
  ASSERT_OK(m) << strerror(errno);
  memset(m.page(3), 0x5a, kPage);
  // Swap-out writes back asynchronously; the page leaves the swap cache
  // (which mincore still counts) only on a later pass.
  unsigned char resident = 1;
  for (int i = 0; i < 20 && (resident & 1) != 0; ++i) {
    if (madvise(m.page(3), kPage, MADV_PAGEOUT) != 0 ||
        mincore(m.page(3), kPage, &resident) != 0) {
      break;
    }
    if (resident & 1) usleep(10'000);
  }
  if ((resident & 1) != 0) {
    GTEST_SKIP() << "MADV_PAGEOUT left the shmem page in memory ("
                 << swap_device << ")";
  }
  EXPECT_EQ(Find(RegionAt(m.data(), 8 * kPage)), Complement(8, {3}));
  EXPECT_EQ(*m.page(3), 0x5a);
  close(fd);
}

// 5.
TEST(FindUntouchedRanges, PrivateFileMappingReportsNothing) {
  const char* dir = getenv("TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/untouched-XXXXXX";
  int fd = mkstemp(path.data());
  ASSERT_GE(fd, 0) << strerror(errno);
  unlink(path.c_str());
  fd = SparseFile(fd, 64);  // holes, except:
  ASSERT_GE(fd, 0);
  PwritePage(fd, 0);
  PwritePage(fd, 33);
  Mapping m(64 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd);
  ASSERT_OK(m) << strerror(errno);
  EXPECT_THAT(Find(RegionAt(m.data(), 64 * kPage)), IsEmpty());
  *m.page(5) = 1;  // a private copy now
  (void)*static_cast<volatile uint8_t*>(m.page(6));
  EXPECT_THAT(Find(RegionAt(m.data(), 64 * kPage)), IsEmpty());
  close(fd);
}

// 6.
TEST(FindUntouchedRanges, TransparentHugePagesAndTheHugeZeroPage) {
  if (!PagemapScanWorks()) GTEST_SKIP() << kNoScan;
  if (!testing::ReadFaultsMapTheZeroPage()) GTEST_SKIP() << kNoZeroPage;
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  if (!std::getline(thp, mode) || mode.find("[never]") != std::string::npos) {
    GTEST_SKIP() << "transparent huge pages are off here (" << mode << ")";
  }
  Mapping raw = Mapping::Anonymous(5 * kHuge);
  ASSERT_OK(raw);
  auto* base = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(raw.data()) + kHuge - 1) / kHuge * kHuge);
  ASSERT_EQ(madvise(base, 4 * kHuge, MADV_HUGEPAGE), 0) << strerror(errno);
  ASSERT_EQ(madvise(base, 4 * kHuge, MADV_POPULATE_READ), 0) << strerror(errno);

  // Say which zero page the read faults got (the answer must not depend
  // on it: both are PAGE_IS_PFNZERO).
  int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(pagemap, 0);
  std::vector<PageRegion> vec(64);
  PmScanArg a{};
  a.size = sizeof a;
  a.start = reinterpret_cast<uint64_t>(base);
  a.end = a.start + 4 * kHuge;
  a.vec = reinterpret_cast<uint64_t>(vec.data());
  a.vec_len = vec.size();
  a.return_mask = kPageIsPresent | kPageIsPfnZero | kPageIsHuge;
  int n = ioctl(pagemap, kPagemapScan, &a);
  close(pagemap);
  ASSERT_GE(n, 1);
  const bool huge_zero =
      n == 1 &&
      vec[0].categories == (kPageIsPresent | kPageIsPfnZero | kPageIsHuge);
  RecordProperty("huge_zero_page", huge_zero ? "yes" : "no");
  std::printf("read faults mapped the %s zero page\n",
              huge_zero ? "huge (PMD)" : "4 KiB");

  const Region r = RegionAt(base, 4 * kHuge, kHuge);
  EXPECT_THAT(Find(r), ElementsAre(ByteRange{0, 4 * kHuge}));
  base[kHuge + 12345] = 1;  // one byte of huge page 1
  EXPECT_THAT(Find(r), ElementsAre(ByteRange{0, kHuge},
                                   ByteRange{2 * kHuge, 2 * kHuge}));
  EXPECT_EQ(base[kHuge + 12345], 1);
}

TEST(FindUntouchedRanges, TrackingPageWithOneWrittenSmallPageIsNotReported) {
  if (!PagemapScanWorks()) GTEST_SKIP() << kNoScan;
  Mapping raw = Mapping::Anonymous(4 * kHuge);
  ASSERT_OK(raw);
  madvise(raw.data(), 4 * kHuge, MADV_NOHUGEPAGE);
  // Only 4 KiB-aligned, as ValidateRegion allows for a 2 MiB page size.
  uint8_t* base = raw.page(3);
  base[kHuge + 511 * kPage] = 1;  // the last 4 KiB of tracking page 1
  EXPECT_THAT(Find(RegionAt(base, 3 * kHuge, kHuge)),
              ElementsAre(ByteRange{0, kHuge}, ByteRange{2 * kHuge, kHuge}));
}

TEST(FindUntouchedRanges, SmallTrackingPagesInsideHostPages) {
  if (!PagemapScanWorks()) GTEST_SKIP() << kNoScan;
  Mapping m = Mapping::Anonymous(8 * kPage);
  ASSERT_OK(m);
  madvise(m.data(), 8 * kPage, MADV_NOHUGEPAGE);
  *m.page(3) = 1;
  // 512-byte pages, the region starting and ending inside host pages.
  EXPECT_THAT(Find(RegionAt(m.data() + 1024, 6 * kPage, 512)),
              ElementsAre(ByteRange{0, 3 * kPage - 1024},
                          ByteRange{4 * kPage - 1024, 2 * kPage + 1024}));
}

// 7.
TEST(FindUntouchedRanges, RegionOverTwoMappingsFollowsEachOnesRule) {
  if (!PagemapScanWorks()) GTEST_SKIP() << kNoScan;
  if (!testing::ReadFaultsMapTheZeroPage()) GTEST_SKIP() << kNoZeroPage;
  Mapping m = Mapping::Anonymous(64 * kPage);
  ASSERT_OK(m);
  madvise(m.data(), 64 * kPage, MADV_NOHUGEPAGE);
  int fd = SparseFile(memfd_create("ramferry-untouched", MFD_CLOEXEC), 32);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_NE(mmap(m.page(32), 32 * kPage, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_FIXED, fd, 0),
            MAP_FAILED)
      << strerror(errno);
  *m.page(2) = 1;                                    // anonymous: data
  (void)*static_cast<volatile uint8_t*>(m.page(5));  // anonymous: zero page
  *m.page(40) = 1;                                   // memfd through the map
  PwritePage(fd, 50 - 32);                           // memfd, not mapped here
  EXPECT_EQ(Find(RegionAt(m.data(), 64 * kPage)), Complement(64, {2, 40, 50}));
  // File holes only: the memfd half's holes, none of the anonymous half.
  absl::StatusOr<std::vector<ByteRange>> holes = FindUntouchedRanges(
      RegionAt(m.data(), 64 * kPage), UntouchedScope::kFileHolesOnly);
  ASSERT_OK(holes);
  EXPECT_EQ(*holes, (std::vector<ByteRange>{{32 * kPage, 8 * kPage},
                                            {41 * kPage, 9 * kPage},
                                            {51 * kPage, 13 * kPage}}));
  close(fd);
}

TEST(FindUntouchedRanges, GapInTheAddressSpaceIsNotReported) {
  if (!PagemapScanWorks()) GTEST_SKIP() << kNoScan;
  Mapping m = Mapping::Anonymous(16 * kPage);
  ASSERT_OK(m);
  ASSERT_EQ(munmap(m.page(4), 4 * kPage), 0);
  EXPECT_EQ(Find(RegionAt(m.data(), 16 * kPage)), Complement(16, {4, 5, 6, 7}));
}

TEST(FindUntouchedRanges, ManyRunsFillTheScanVector) {
  if (!PagemapScanWorks()) GTEST_SKIP() << kNoScan;
  // Every other page written: 4096 runs, four times the output vector.
  constexpr uint64_t kPages = 8192;
  Mapping m = Mapping::Anonymous(kPages * kPage);
  ASSERT_OK(m);
  madvise(m.data(), kPages * kPage, MADV_NOHUGEPAGE);
  std::set<uint64_t> written;
  for (uint64_t p = 0; p < kPages; p += 2) {
    *m.page(p) = 1;
    written.insert(p);
  }
  EXPECT_EQ(Find(RegionAt(m.data(), kPages * kPage)),
            Complement(kPages, written));
}

}  // namespace
}  // namespace ramferry::engine
