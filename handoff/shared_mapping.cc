#include "handoff/shared_mapping.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace ramferry::handoff {

absl::StatusOr<SharedMapping> SharedMapping::Map(int fd, uint64_t offset,
                                                 uint64_t length,
                                                 bool writable) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fstat of a handed-over memory descriptor: %s",
                        std::generic_category().message(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        "a handed-over memory descriptor is not a regular file (want a "
        "memfd, tmpfs, hugetlbfs or disk file)");
  }
  if (static_cast<uint64_t>(st.st_size) < offset ||
      static_cast<uint64_t>(st.st_size) - offset < length) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a handed-over memory file holds %d bytes, fewer than the region's "
        "%d bytes at offset %d",
        st.st_size, length, offset));
  }
  void* p = mmap(nullptr, length, PROT_READ | (writable ? PROT_WRITE : 0),
                 MAP_SHARED, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("mmap of %d handed-over bytes: %s", length,
                        std::generic_category().message(errno)));
  }
  return SharedMapping(p, length);
}

SharedMapping::SharedMapping(SharedMapping&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      length_(std::exchange(o.length_, 0)) {}

SharedMapping& SharedMapping::operator=(SharedMapping&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) munmap(data_, length_);
    data_ = std::exchange(o.data_, nullptr);
    length_ = std::exchange(o.length_, 0);
  }
  return *this;
}

SharedMapping::~SharedMapping() {
  if (data_ != nullptr) munmap(data_, length_);
}

}  // namespace ramferry::handoff
