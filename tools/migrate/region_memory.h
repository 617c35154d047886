// The memory a migration moves: anonymous memory of this process, or a
// shared file mapping (e.g. in /dev/shm) so another program's memory can be
// migrated and the destination writes the same file.
#ifndef RAMFERRY_TOOLS_MIGRATE_REGION_MEMORY_H_
#define RAMFERRY_TOOLS_MIGRATE_REGION_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ramferry::migrate {

class RegionMemory {
 public:
  // Anonymous memory of `bytes`; `huge_pages` asks for transparent huge
  // pages (MADV_HUGEPAGE), which cut first-touch faults 512-fold where
  // the kernel grants them (THP "madvise" or "always").
  static absl::StatusOr<std::unique_ptr<RegionMemory>> Anonymous(
      uint64_t bytes, bool huge_pages = false);
  // An existing file mapped shared; its size is the region's.
  static absl::StatusOr<std::unique_ptr<RegionMemory>> OpenFile(
      const std::string& path);
  // A file of `bytes` mapped shared: created, or reused as it is when it
  // already has that size (its pages stay allocated: a warm destination),
  // or resized from zero otherwise. `existed` says whether it was reused.
  // Refused (RESOURCE_EXHAUSTED, saying the sizes and the free space)
  // before anything is mapped where its filesystem has no room for
  // `bytes`.
  static absl::StatusOr<std::unique_ptr<RegionMemory>> CreateFile(
      const std::string& path, uint64_t bytes, bool* existed = nullptr);
  // A fresh memfd of `bytes` mapped shared (reads as zero): memory another
  // process can adopt once it is received (--export).
  static absl::StatusOr<std::unique_ptr<RegionMemory>> Memfd(uint64_t bytes);
  ~RegionMemory();

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool file_backed() const { return file_backed_; }
  // A file that CreateFile found at the right size and kept.
  bool reused_file() const { return reused_file_; }
  // The file a shared mapping maps (-1 for anonymous memory); owned here.
  int fd() const { return fd_; }

 private:
  static absl::StatusOr<std::unique_ptr<RegionMemory>> MapFile(int fd,
                                                               uint64_t bytes);
  RegionMemory(uint8_t* data, uint64_t size, int fd)
      : data_(data), size_(size), file_backed_(fd >= 0), fd_(fd) {}
  uint8_t* data_;
  uint64_t size_;
  bool file_backed_;
  int fd_;
  bool reused_file_ = false;
};

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_REGION_MEMORY_H_
