// A MAP_SHARED mapping of part of a file that came from another process
// (handoff/unix_seqpacket.h), unmapped when its owner goes. The file is
// checked before it is mapped: a descriptor that is not a regular file
// (memfd, tmpfs, hugetlbfs or disk file) or is shorter than the range
// would fault (SIGBUS) where the peer said there was memory.
#ifndef RAMFERRY_HANDOFF_SHARED_MAPPING_H_
#define RAMFERRY_HANDOFF_SHARED_MAPPING_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace ramferry::handoff {

class SharedMapping {
 public:
  static absl::StatusOr<SharedMapping> Map(int fd, uint64_t offset,
                                           uint64_t length, bool writable);
  SharedMapping() = default;
  SharedMapping(SharedMapping&& o) noexcept;
  SharedMapping& operator=(SharedMapping&& o) noexcept;
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  ~SharedMapping();

  void* data() const { return data_; }
  uint64_t size() const { return length_; }

 private:
  SharedMapping(void* data, uint64_t length) : data_(data), length_(length) {}
  void* data_ = nullptr;
  uint64_t length_ = 0;
};

}  // namespace ramferry::handoff

#endif  // RAMFERRY_HANDOFF_SHARED_MAPPING_H_
