// Caller memory that ramferry moves: a region is a page-aligned range with
// an id both ends agree on.
#ifndef RAMFERRY_REGION_H_
#define RAMFERRY_REGION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ramferry {

// The base page of the machines ramferry runs on (x86-64, arm64 with 4 KiB
// pages): the default tracking granularity, and the unit the tools count
// memory in.
inline constexpr uint32_t kPageSize = 4096;

struct Region {
  uint32_t id = 0;
  std::string name;
  void* base = nullptr;  // 4 KiB-aligned; owned by the caller
  uint64_t length = 0;   // a multiple of page_size
  uint32_t page_size = kPageSize;
  // Destination: every byte reads as zero when the session starts (fresh
  // anonymous memory, a new or truncated file) and only the session writes
  // it. Zero pages that arrive for a page no data landed on are then not
  // written at all, which leaves memory the source never filled
  // unallocated. False (the safe default): each zero page is read and
  // zero-filled only where it is not zero already.
  bool reads_as_zero = false;
  // The file that `base` maps MAP_SHARED, and where in it the mapping
  // starts, when the caller has one (a memfd, a tmpfs file): -1 for none.
  // It stays the caller's, open for the session. On the socket
  // transports the engine then moves long runs of pages through the file
  // (pread, pwrite) instead of through this process's page tables: no
  // page-table entry is made, and none is read, for them. That saves the
  // page faults or the populate a mapping costs on first touch, which
  // under a hypervisor that shadows page tables is a host exit for each
  // page from the kernel's copy and another from user space (1.3-1.5 s
  // per GiB each, measured; the file path moves a GiB in 0.08-0.16 s). A
  // destination written this way is read through the mapping as usual.
  // ValidateRegion checks that the descriptor is a regular file that
  // really backs the mapping, shared, at `fd_offset`; a destination needs
  // it opened for writing. Not hugetlbfs, which cannot be written with
  // pwrite.
  int fd = -1;
  uint64_t fd_offset = 0;

  uint64_t page_count() const { return length / page_size; }
  uint8_t* page(uint64_t index) const {
    return static_cast<uint8_t*>(base) + index * page_size;
  }
};

// Checks a region the caller hands in: base aligned, length and page size
// sane (the same rules the wire applies to a region table).
absl::Status ValidateRegion(const Region& region);

// Anonymous memory for a region, unmapped on destruction. Optional guard
// pages (PROT_NONE) on both sides turn any stray write into a crash that a
// test can see, instead of silent corruption.
class MappedMemory {
 public:
  struct Options {
    bool huge_pages = false;  // MADV_HUGEPAGE (transparent huge pages)
    bool guard_pages = false;
  };
  static absl::StatusOr<std::unique_ptr<MappedMemory>> Allocate(
      uint64_t length, const Options& options);
  static absl::StatusOr<std::unique_ptr<MappedMemory>> Allocate(
      uint64_t length) {
    return Allocate(length, Options{});
  }
  ~MappedMemory();
  MappedMemory(const MappedMemory&) = delete;
  MappedMemory& operator=(const MappedMemory&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return length_; }

 private:
  MappedMemory(uint8_t* mapping, size_t mapping_length, uint8_t* data,
               uint64_t length)
      : mapping_(mapping),
        mapping_length_(mapping_length),
        data_(data),
        length_(length) {}
  uint8_t* mapping_;
  size_t mapping_length_;
  uint8_t* data_;
  uint64_t length_;
};

// Faults in every page of [base, base+length) for writing, with `threads`
// threads, so that data arriving later does not pay first-touch faults
// (about 10x slower than warm memory on the machines we measured).
// Uses MADV_POPULATE_WRITE where the kernel has it, else touches pages.
absl::Status PrefaultForWrite(void* base, uint64_t length, int threads = 2);

// Maps every page of [base, base+length) for reading, with `threads`
// threads (MADV_POPULATE_READ), so reads that follow take no faults. Best
// effort: a kernel without it leaves the pages to fault in as they are read.
void PrefaultForRead(void* base, uint64_t length, int threads = 2);

// Fills memory with pseudo-random bytes from `seed`, in parallel.
void FillRandom(void* base, uint64_t length, uint64_t seed, int threads = 2);

}  // namespace ramferry

#endif  // RAMFERRY_REGION_H_
