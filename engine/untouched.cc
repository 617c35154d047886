#include "engine/untouched.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/errno_status.h"
#include "base/owned_fd.h"
#include "base/pagemap_scan.h"
#include "base/proc_maps.h"
#include "base/status_macros.h"
#include "base/status_util.h"

namespace ramferry::engine {
using base::ClassifyVma;
using base::kPageIsPfnZero;
using base::kPageIsPresent;
using base::kPageIsSwapped;
using base::kPagemapScan;
using base::MapsEntry;
using base::PageRegion;
using base::PmScanArg;
using base::VmaKind;

namespace {

// Appends the pieces of [lo, hi) (addresses inside one private anonymous
// VMA) that read as zero, as offsets from `base`. False: this kernel has
// no PAGEMAP_SCAN, or refuses it; what was appended before still holds.
absl::StatusOr<bool> ScanAnonymous(int pagemap, uint64_t lo, uint64_t hi,
                                   uint64_t base, std::vector<PageRegion>& vec,
                                   std::vector<ByteRange>& out) {
  // The scan takes host pages; a region of 512-byte tracking pages may
  // start or end inside one (VMAs never do). What reads zero in a whole
  // host page reads zero in any part of it, so clip the answer instead.
  const uint64_t host = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t start = lo / host * host;
  const uint64_t scan_end = (hi + host - 1) / host * host;
  while (start < scan_end) {
    PmScanArg a{};
    a.size = sizeof a;
    a.flags = 0;  // no kScanWpMatching: read the page tables, change nothing
    a.start = start;
    a.end = scan_end;
    a.vec = reinterpret_cast<uint64_t>(vec.data());
    a.vec_len = vec.size();
    // No filter: every run comes back, tagged with just the categories
    // that decide, so like pages merge into few runs and one pass answers
    // both "absent" and "on the zero page".
    a.return_mask = kPageIsPresent | kPageIsSwapped | kPageIsPfnZero;
    int n = ioctl(pagemap, kPagemapScan, &a);
    if (n < 0) {
      int err = errno;
      if (err == EINTR) continue;
      if (err == ENOTTY || err == EINVAL || err == EOPNOTSUPP || err == EPERM ||
          err == EACCES) {
        return false;
      }
      return base::ErrnoStatus(
          err, absl::StrFormat("PAGEMAP_SCAN of [%#x, %#x)", start, scan_end));
    }
    for (int i = 0; i < n; ++i) {
      const PageRegion& r = vec[i];
      if (r.start < start || r.end > scan_end || r.end <= r.start) {
        return absl::InternalError(
            absl::StrFormat("PAGEMAP_SCAN of [%#x, %#x) returned [%#x, %#x)",
                            start, scan_end, r.start, r.end));
      }
      const uint64_t from = std::max(r.start, lo);
      const uint64_t to = std::min(r.end, hi);
      if (from < to && AnonymousPieceReadsZero(r.categories)) {
        out.push_back({from - base, to - from});
      }
    }
    // A full vector stops the walk early; walk_end says where.
    if (a.walk_end <= start) {
      return absl::InternalError(absl::StrFormat(
          "PAGEMAP_SCAN of [%#x, %#x) made no progress", start, scan_end));
    }
    start = a.walk_end;
  }
  return true;
}

bool SameFile(const struct stat& st, const MapsEntry& e) {
  return S_ISREG(st.st_mode) && st.st_ino == e.inode &&
         major(st.st_dev) == e.dev_major && minor(st.st_dev) == e.dev_minor;
}

// A descriptor of the file `e` maps: `known` (the region's own,
// Region::fd, not taken) where it is that file, else one opened through
// /proc/self/map_files, which needs CAP_CHECKPOINT_RESTORE or
// CAP_SYS_ADMIN; -1 where neither works.
base::OwnedFd OpenMappedFile(const MapsEntry& e, int known, int* fd) {
  struct stat st;
  if (known >= 0 && fstat(known, &st) == 0 && SameFile(st, e)) {
    *fd = known;
    return base::OwnedFd();
  }
  // map_files names have no leading zeros (the kernel rejects them).
  const std::string path =
      absl::StrFormat("/proc/self/map_files/%x-%x", e.start, e.end);
  // stat before open: opening a device could have side effects.
  if (stat(path.c_str(), &st) != 0 || !SameFile(st, e)) {
    *fd = -1;
    return base::OwnedFd();
  }
  base::OwnedFd opened(
      open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  *fd = opened.get();
  return opened;
}

// Appends the holes of the file mapped by `e` over [lo, hi) (addresses
// inside it), as offsets from `base`. Appends nothing wherever the kernel
// will not say: a file we may not open, not the inode maps named (the VMA
// changed under us), no SEEK_HOLE, a size that moved during the scan.
// `known`: the region's own descriptor of its file (-1: none).
void SharedFileHoles(const MapsEntry& e, uint64_t lo, uint64_t hi,
                     uint64_t base, int known, std::vector<ByteRange>& out) {
  int file = -1;
  const base::OwnedFd owned = OpenMappedFile(e, known, &file);
  struct stat before;
  if (file < 0 || fstat(file, &before) != 0 || !SameFile(before, e)) return;
  const uint64_t file_lo = e.offset + (lo - e.start);
  // Past EOF a mapped page raises SIGBUS: it does not read as zero.
  const uint64_t size = static_cast<uint64_t>(before.st_size);
  const uint64_t file_hi = std::min(file_lo + (hi - lo), size);
  std::vector<ByteRange> holes;  // file offsets
  uint64_t pos = file_lo;
  while (pos < file_hi) {
    off_t data = lseek(file, static_cast<off_t>(pos), SEEK_DATA);
    if (data < 0) {
      if (errno != ENXIO) return;             // no SEEK_DATA here: say nothing
      holes.push_back({pos, file_hi - pos});  // no data before EOF
      break;
    }
    const uint64_t d = static_cast<uint64_t>(data);
    if (d < pos) return;
    if (d > pos) holes.push_back({pos, std::min(d, file_hi) - pos});
    if (d >= file_hi) break;
    off_t hole = lseek(file, data, SEEK_HOLE);
    if (hole <= data) return;  // error, or truncated under us
    pos = static_cast<uint64_t>(hole);
  }
  // A truncate during the loop could have turned a hole into EOF.
  struct stat after;
  if (fstat(file, &after) != 0 || after.st_size != before.st_size) return;
  for (const ByteRange& h : holes) {
    out.push_back({lo - base + (h.offset - file_lo), h.length});
  }
}

// What reads zero across one region, one mapping at a time (in address
// order), as offsets from the region's base.
class UntouchedScan {
 public:
  UntouchedScan(const Region& region, UntouchedScope scope)
      : region_(region),
        scope_(scope),
        base_(reinterpret_cast<uint64_t>(region.base)),
        end_(base_ + region.length) {}

  // Adds what reads zero where `e` overlaps the region; false once the
  // mappings are past it.
  absl::StatusOr<bool> Add(const MapsEntry& e) {
    if (e.end <= base_) return true;
    if (e.start >= end_) return false;
    const uint64_t lo = std::max(e.start, base_);
    const uint64_t hi = std::min(e.end, end_);
    switch (ClassifyVma(e)) {
      case VmaKind::kPrivateAnonymous:
        if (scan_available_ && scope_ != UntouchedScope::kFileHolesOnly) {
          RAMFERRY_RETURN_IF_ERROR(AddAnonymous(lo, hi));
        }
        break;
      case VmaKind::kSharedFile:
        SharedFileHoles(e, lo, hi, base_, region_.fd, pieces_);
        break;
      case VmaKind::kOther:
        break;
    }
    return true;
  }

  const std::vector<ByteRange>& pieces() const { return pieces_; }

 private:
  absl::Status AddAnonymous(uint64_t lo, uint64_t hi) {
    if (!pagemap_) {
      pagemap_.emplace(open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
      vec_.resize(1024);
    }
    if (pagemap_->get() < 0) {
      scan_available_ = false;
      return absl::OkStatus();
    }
    RAMFERRY_ASSIGN_OR_RETURN(
        scan_available_,
        ScanAnonymous(pagemap_->get(), lo, hi, base_, vec_, pieces_));
    return absl::OkStatus();
  }

  const Region& region_;
  const UntouchedScope scope_;
  const uint64_t base_;
  const uint64_t end_;
  std::vector<ByteRange> pieces_;
  std::vector<PageRegion> vec_;  // PAGEMAP_SCAN output, allocated on need
  std::optional<base::OwnedFd> pagemap_;
  bool scan_available_ = true;  // until the kernel says otherwise
};

}  // namespace

bool AnonymousPieceReadsZero(uint64_t categories) {
  if (categories & kPageIsSwapped) return false;  // holds data, elsewhere
  if (categories & kPageIsPresent) return (categories & kPageIsPfnZero) != 0;
  return true;
}

ByteRange AlignInward(ByteRange range, uint64_t align) {
  uint64_t begin = (range.offset + align - 1) / align * align;
  uint64_t end = range.end() / align * align;
  return {begin, end > begin ? end - begin : 0};
}

std::vector<ByteRange> ToPageRanges(absl::Span<const ByteRange> pieces,
                                    uint64_t page_size) {
  std::vector<ByteRange> sorted(pieces.begin(), pieces.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const ByteRange& a, const ByteRange& b) {
              return a.offset < b.offset;
            });
  // Merge into maximal runs first: a page is covered by the union only if
  // it lies inside one run, so aligning each run inward loses no page.
  // Runs are separated by gaps, so the aligned ones neither touch nor
  // overlap.
  std::vector<ByteRange> out;
  auto flush = [&](const ByteRange& run) {
    ByteRange aligned = AlignInward(run, page_size);
    if (aligned.length != 0) out.push_back(aligned);
  };
  std::optional<ByteRange> run;
  for (const ByteRange& p : sorted) {
    if (p.length == 0) continue;
    if (run && p.offset <= run->end()) {
      run->length = std::max(run->end(), p.end()) - run->offset;
      continue;
    }
    if (run) flush(*run);
    run = p;
  }
  if (run) flush(*run);
  return out;
}

}  // namespace ramferry::engine

namespace ramferry {

// The engine's pieces (engine/untouched.h) at work.
absl::StatusOr<std::vector<ByteRange>> FindUntouchedRanges(
    const Region& region, UntouchedScope scope) {
  using namespace engine;  // NOLINT(google-build-using-namespace)
  if (absl::Status s = ValidateRegion(region); !s.ok()) {
    return base::Annotate(s, "finding untouched pages");
  }
  const auto where = [&](const absl::Status& s) {
    return base::Annotate(
        s, absl::StrFormat("finding untouched pages of region %d", region.id));
  };
  absl::StatusOr<std::string> maps = base::ReadProcFile("/proc/self/maps");
  if (!maps.ok()) return where(maps.status());
  UntouchedScan scan(region, scope);
  absl::Status failed;
  absl::Status s = base::ForEachMapping(
      *maps, base::MapsFile::kMaps, "/proc/self/maps", [&](const MapsEntry& e) {
        absl::StatusOr<bool> more = scan.Add(e);
        if (!more.ok()) failed = more.status();
        return more.value_or(false);
      });
  if (!s.ok()) return where(s);
  if (!failed.ok()) return where(failed);
  return ToPageRanges(scan.pieces(), region.page_size);
}

}  // namespace ramferry
