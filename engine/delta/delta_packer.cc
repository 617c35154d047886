#include "engine/delta/delta_packer.h"

#include <unistd.h>

#include <cstring>

#include "base/clock.h"
#include "proto/packet.h"
#include "proto/page_delta.h"

namespace ramferry::engine {
namespace {

// Commits `bytes` of fresh cache slots at `at` (no other thread touches a
// pinned slot): a write per host page, from this thread, through the
// slots' own mapping. Not MADV_POPULATE_WRITE: where the host shadows the
// guest's page tables, a page the kernel populated still costs a host
// exit on the first touch from user space, which is the cost to take
// here.
void Commit(uint8_t* at, uint64_t bytes) {
  const uint64_t step = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  for (uint64_t done = 0; done < bytes; done += step) {
    reinterpret_cast<volatile uint8_t*>(at)[done] = 0;
  }
}

// Reads a page the workload may be writing, by design, as a send does: not
// instrumented for TSan, like the workload's own writers.
__attribute__((no_sanitize("thread"))) void CopyLivePage(uint8_t* to,
                                                         const uint8_t* live,
                                                         size_t bytes) {
  std::memcpy(to, live, bytes);
}

}  // namespace

DeltaPacker::DeltaPacker(DeltaCache* cache) : cache_(cache) {}

DeltaPacker::Packed DeltaPacker::PinPages(uint32_t page_size, uint32_t index,
                                          absl::Span<const uint64_t> entries) {
  // A zero page goes as its flag alone, so the copy of what it was is stale.
  pages_.clear();
  for (uint64_t entry : entries) {
    if (proto::IsZeroPageEntry(entry)) {
      pages_.push_back(proto::PageOffsetOf(entry) / page_size);
    }
  }
  if (!pages_.empty()) cache_->Forget(index, pages_);
  pages_.clear();
  for (uint64_t entry : entries) {
    if (!proto::IsZeroPageEntry(entry)) pages_.push_back(entry / page_size);
  }
  pins_.resize(pages_.size());
  Packed packed;
  packed.cache = cache_->Pin(index, pages_, absl::MakeSpan(pins_));
  if (packed.cache.fresh != 0) {
    // Apart, so what the packing takes is its own steady cost.
    const uint64_t start = base::ThreadCpuNs();
    Commit(cache_->slot_data(packed.cache.first_fresh),
           uint64_t{packed.cache.fresh} * page_size);
    packed.fill_cpu_ns = base::ThreadCpuNs() - start;
  }
  return packed;
}

size_t DeltaPacker::AppendRecord(const uint8_t* live, uint8_t* copy,
                                 uint32_t page_size, uint64_t at) {
  const uint32_t max_record = proto::MaxDeltaBytes(page_size);
  // Room for this record at most: the buffer grows with the records a
  // packet takes, never to pages x max_record up front (review F8).
  if (records_.size() < at + max_record) records_.resize(at + max_record);
  proto::RefreshCopy(live, copy, xor_.data(), page_size);
  return proto::EncodeDelta(xor_,
                            absl::MakeSpan(records_.data() + at, max_record));
}

DeltaPacker::Packed DeltaPacker::Pack(const Region& region, uint32_t index,
                                      absl::Span<uint64_t> entries,
                                      uint8_t* out, std::vector<iovec>* sent,
                                      std::vector<uint64_t>* sent_offsets) {
  const uint32_t page_size = region.page_size;
  auto* base = static_cast<uint8_t*>(region.base);
  Packed packed = PinPages(page_size, index, entries);
  xor_.resize(page_size);
  sent->clear();
  sent_offsets->clear();
  uint64_t whole = 0, records = 0;
  size_t k = 0;
  for (uint64_t& entry : entries) {
    if (proto::IsZeroPageEntry(entry)) continue;
    const uint64_t offset = entry;
    const DeltaCache::Pinned pin = pins_[k++];
    const uint8_t* live = base + offset;
    uint8_t* copy =
        pin.slot == DeltaCache::kNoSlot ? nullptr : cache_->slot_data(pin.slot);
    sent_offsets->push_back(offset);
    if (pin.hit) {
      if (const size_t n = AppendRecord(live, copy, page_size, records);
          n != 0) {
        entry = proto::DeltaPageEntry(offset, static_cast<uint32_t>(n));
        records += n;
        ++packed.delta_pages;
        sent->push_back({copy, page_size});
        continue;
      }
    } else if (copy != nullptr) {
      CopyLivePage(copy, live, page_size);
    }
    // Whole, from the copy where there is one: the copy is what went.
    uint8_t* at = out + whole;
    if (copy != nullptr) {
      std::memcpy(at, copy, page_size);
    } else {
      CopyLivePage(at, live, page_size);
    }
    whole += page_size;
    sent->push_back({copy != nullptr ? copy : at, page_size});
  }
  // records_ may be empty (its data() null) when no page went as a delta.
  if (records != 0) std::memcpy(out + whole, records_.data(), records);
  packed.record_bytes = records;
  packed.payload_bytes = whole + records;
  return packed;
}

void DeltaPacker::Finish(bool delivered, uint32_t channel, uint64_t round) {
  cache_->Unpin(pins_, delivered, channel, round);
  pins_.clear();
}

void DeltaPacker::Forget(const Region& region, uint32_t index,
                         absl::Span<const uint64_t> entries) {
  pages_.clear();
  for (uint64_t entry : entries) {
    pages_.push_back(proto::PageOffsetOf(entry) / region.page_size);
  }
  cache_->Forget(index, pages_);
}

}  // namespace ramferry::engine
