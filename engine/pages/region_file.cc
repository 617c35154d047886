#include "engine/pages/region_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/proc_maps.h"
#include "base/status_macros.h"

namespace ramferry::engine {
namespace {

constexpr int64_t kHugetlbfsMagic = 0x958458f6;

absl::Status RegionError(const Region& r, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("region %d: fd %d %s; leave Region::fd at -1 to move "
                      "its pages through the mapping",
                      r.id, r.fd, what));
}

// The mappings /proc/self/maps lists over [base, base + length), in order:
// each must be shared and map the file `st` at the offset that keeps the
// range one contiguous stretch of it from fd_offset.
absl::Status CheckMappings(const Region& r, const struct stat& st) {
  RAMFERRY_ASSIGN_OR_RETURN(const std::string maps,
                            base::ReadProcFile("/proc/self/maps"));
  const auto begin = reinterpret_cast<uint64_t>(r.base);
  const uint64_t end = begin + r.length;
  uint64_t covered = begin;  // everything below it checked
  absl::Status status;
  RAMFERRY_RETURN_IF_ERROR(base::ForEachMapping(
      maps, base::MapsFile::kMaps, "/proc/self/maps",
      [&](const base::MapsEntry& e) {
        if (e.end <= covered) return true;
        if (e.start > covered) return false;  // a hole: reported below
        const uint64_t want = r.fd_offset + (covered - begin);
        const uint64_t have = e.offset + (covered - e.start);
        if (!e.shared || e.dev_major != major(st.st_dev) ||
            e.dev_minor != minor(st.st_dev) || e.inode != st.st_ino ||
            have != want) {
          status = RegionError(
              r,
              absl::StrFormat(
                  "does not back its memory: at %#x the memory is %s "
                  "(device %x:%x, inode %d, file offset %d), not a shared "
                  "mapping of the descriptor's file (device %x:%x, inode "
                  "%d) at file offset %d",
                  covered, e.shared ? "a shared mapping" : "a private mapping",
                  e.dev_major, e.dev_minor, e.inode, have, major(st.st_dev),
                  minor(st.st_dev), st.st_ino, want));
          return false;
        }
        covered = e.end;
        return covered < end;
      }));
  RAMFERRY_RETURN_IF_ERROR(status);
  if (covered < end) {
    return RegionError(
        r, absl::StrFormat("cannot be checked against its memory: nothing is "
                           "mapped at %#x",
                           covered));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRegionFile(const Region& r, bool writable) {
  if (r.fd < 0) return absl::OkStatus();
  struct stat st;
  if (fstat(r.fd, &st) != 0) {
    return RegionError(
        r, absl::StrFormat("cannot be examined: %s",
                           base::ErrnoStatus(errno, "fstat").message()));
  }
  if (!S_ISREG(st.st_mode)) return RegionError(r, "is not a regular file");
  struct statfs fs;
  if (fstatfs(r.fd, &fs) == 0 &&
      static_cast<int64_t>(fs.f_type) == kHugetlbfsMagic) {
    return RegionError(r, "is on hugetlbfs, which pwrite cannot write");
  }
  if (r.fd_offset % 4096 != 0) {
    return RegionError(r, absl::StrFormat("has fd_offset %d, not a multiple "
                                          "of 4096",
                                          r.fd_offset));
  }
  if (static_cast<uint64_t>(st.st_size) < r.fd_offset ||
      static_cast<uint64_t>(st.st_size) - r.fd_offset < r.length) {
    return RegionError(r, absl::StrFormat("is %d bytes, too short for %d "
                                          "bytes from offset %d",
                                          st.st_size, r.length, r.fd_offset));
  }
  const int flags = fcntl(r.fd, F_GETFL);
  const int mode = flags & O_ACCMODE;
  if (flags < 0 || mode == O_WRONLY || (writable && mode != O_RDWR)) {
    return RegionError(r, writable ? "is not open for reading and writing"
                                   : "is not open for reading");
  }
  return CheckMappings(r, st);
}

namespace {

// One system call per run (more where one comes back short): `io` is
// pread or pwrite, `buffer` the runs back to back.
template <typename Byte, typename Io>
absl::Status MoveRuns(const Region& region,
                      absl::Span<const uint64_t> run_offsets,
                      absl::Span<const iovec> runs, Byte* buffer, Io io,
                      absl::string_view what) {
  for (size_t i = 0; i < runs.size(); ++i) {
    const off_t at = static_cast<off_t>(region.fd_offset + run_offsets[i]);
    size_t done = 0;
    while (done < runs[i].iov_len) {
      const ssize_t n = io(region.fd, buffer + done, runs[i].iov_len - done,
                           at + static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // 0: the file shrank under the session. A write error is often
        // ENOSPC, where a store through the mapping would have been
        // SIGBUS: a full tmpfs ends the session with its cause.
        return base::ErrnoStatus(
            n == 0 ? EIO : errno,
            absl::StrFormat("%s region %d's file at offset %d", what, region.id,
                            run_offsets[i] + done));
      }
      done += static_cast<size_t>(n);
    }
    buffer += runs[i].iov_len;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadRuns(const Region& region,
                      absl::Span<const uint64_t> run_offsets,
                      absl::Span<const iovec> runs, uint8_t* dst) {
  return MoveRuns(region, run_offsets, runs, dst, pread, "reading");
}

absl::Status WriteRuns(const Region& region,
                       absl::Span<const uint64_t> run_offsets,
                       absl::Span<const iovec> runs, const uint8_t* src) {
  return MoveRuns(region, run_offsets, runs, src, pwrite, "writing");
}

}  // namespace ramferry::engine
