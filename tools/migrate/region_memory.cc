#include "tools/migrate/region_memory.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <system_error>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "ramferry/region.h"
#include "tools/common/cli.h"

namespace ramferry::migrate {
namespace {

absl::Status Errno(absl::string_view what, absl::string_view path) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s %s: %s", what, path, std::generic_category().message(errno)));
}

absl::StatusOr<uint8_t*> Map(uint64_t bytes, int fd) {
  void* m = mmap(
      nullptr, bytes, PROT_READ | PROT_WRITE,
      fd < 0 ? MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE : MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "mmap of %d bytes: %s", bytes, std::generic_category().message(errno)));
  }
  return static_cast<uint8_t*>(m);
}

absl::Status CheckSize(uint64_t bytes) {
  if (bytes == 0 || bytes % kPageSize != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "region size %d is not a positive multiple of 4 KiB", bytes));
  }
  return absl::OkStatus();
}

// A file that must grow to `bytes` on a filesystem without room for it
// fails only once pages land in it (ENOSPC on a write through the file,
// SIGBUS or EFAULT through the mapping), with the source already sending:
// refused here, before anything is mapped. Resized, the file starts over
// (its blocks are freed first); reused, its holes are filled: either way
// it needs `bytes` of its filesystem's free space and what it holds.
absl::Status CheckRoom(int fd, const std::string& path, uint64_t bytes,
                       const struct stat& st) {
  struct statvfs vfs;
  if (fstatvfs(fd, &vfs) != 0) return absl::OkStatus();  // cannot tell
  // Root may use the blocks a filesystem reserves (ext4's 5%).
  const uint64_t free_blocks = geteuid() == 0 ? vfs.f_bfree : vfs.f_bavail;
  const uint64_t free = free_blocks * vfs.f_frsize;
  const uint64_t held = static_cast<uint64_t>(st.st_blocks) * 512;
  if (bytes <= free + held) return absl::OkStatus();
  const std::string dir =
      path.find('/') == std::string::npos
          ? std::string(".")
          : path.substr(0, std::max<size_t>(path.rfind('/'), 1));
  return absl::ResourceExhaustedError(absl::StrFormat(
      "region file %s is %s (%s of it allocated) and --size is %s, but its "
      "filesystem has %s free: %s short. Free space there (df -h %s), give "
      "a smaller --size, or put --region-file on a filesystem with room",
      path, cli::FormatBytes(static_cast<uint64_t>(st.st_size)),
      cli::FormatBytes(held), cli::FormatBytes(bytes), cli::FormatBytes(free),
      cli::FormatBytes(bytes - free - held), dir));
}

}  // namespace

// Maps `fd` (taking it: closed with the memory, or now on failure).
absl::StatusOr<std::unique_ptr<RegionMemory>> RegionMemory::MapFile(
    int fd, uint64_t bytes) {
  absl::StatusOr<uint8_t*> m = Map(bytes, fd);
  if (!m.ok()) {
    close(fd);
    return m.status();
  }
  return std::unique_ptr<RegionMemory>(new RegionMemory(*m, bytes, fd));
}

absl::StatusOr<std::unique_ptr<RegionMemory>> RegionMemory::Anonymous(
    uint64_t bytes, bool huge_pages) {
  RAMFERRY_RETURN_IF_ERROR(CheckSize(bytes));
  // Anonymous memory is filled (source) or received into (destination):
  // more than the machine has could only end in the OOM killer, late.
  const uint64_t machine = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                           static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (bytes > machine) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "a region of %d bytes is larger than this machine's memory (%d "
        "bytes); use a smaller --size, or --region-file for memory that "
        "lives elsewhere",
        bytes, machine));
  }
  absl::StatusOr<uint8_t*> m = Map(bytes, -1);
  if (!m.ok()) return m.status();
  // Advice only: a kernel without THP keeps 4 KiB pages and says EINVAL.
  if (huge_pages) madvise(*m, bytes, MADV_HUGEPAGE);
  return std::unique_ptr<RegionMemory>(new RegionMemory(*m, bytes, -1));
}

absl::StatusOr<std::unique_ptr<RegionMemory>> RegionMemory::OpenFile(
    const std::string& path) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open region file", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    absl::Status s = Errno("cannot stat region file", path);
    close(fd);
    return s;
  }
  const uint64_t bytes = static_cast<uint64_t>(st.st_size);
  if (bytes == 0 || bytes % kPageSize != 0) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrFormat(
        "region file %s is %d bytes; want a positive multiple of 4 KiB", path,
        bytes));
  }
  return MapFile(fd, bytes);
}

absl::StatusOr<std::unique_ptr<RegionMemory>> RegionMemory::CreateFile(
    const std::string& path, uint64_t bytes, bool* existed) {
  RAMFERRY_RETURN_IF_ERROR(CheckSize(bytes));
  struct stat st;
  const bool created = stat(path.c_str(), &st) != 0 && errno == ENOENT;
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create region file", path);
  if (fstat(fd, &st) != 0) {
    absl::Status s = Errno("cannot stat region file", path);
    close(fd);
    return s;
  }
  if (absl::Status s = CheckRoom(fd, path, bytes, st); !s.ok()) {
    close(fd);
    if (created) unlink(path.c_str());  // leave nothing of a refused run
    return s;
  }
  const bool reuse = static_cast<uint64_t>(st.st_size) == bytes;
  if (existed != nullptr) *existed = reuse;
  // Every page is sent in round 0, so old content is overwritten; a file
  // of another size starts over, sparse.
  if (!reuse && (ftruncate(fd, 0) != 0 ||
                 ftruncate(fd, static_cast<off_t>(bytes)) != 0)) {
    absl::Status s = Errno("cannot size region file", path);
    close(fd);
    return s;
  }
  absl::StatusOr<std::unique_ptr<RegionMemory>> r = MapFile(fd, bytes);
  if (r.ok()) (*r)->reused_file_ = reuse;
  return r;
}

absl::StatusOr<std::unique_ptr<RegionMemory>> RegionMemory::Memfd(
    uint64_t bytes) {
  RAMFERRY_RETURN_IF_ERROR(CheckSize(bytes));
  const int fd = memfd_create("ramferry-received", MFD_CLOEXEC);
  if (fd < 0) return Errno("cannot create", "a memfd");
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    absl::Status s = Errno("cannot size", "the memfd");
    close(fd);
    return s;
  }
  return MapFile(fd, bytes);
}

RegionMemory::~RegionMemory() {
  munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
}

}  // namespace ramferry::migrate
