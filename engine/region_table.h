// Region lookup by wire id, for the receive path.
#ifndef RAMFERRY_ENGINE_REGION_TABLE_H_
#define RAMFERRY_ENGINE_REGION_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/control.h"
#include "ramferry/region.h"

namespace ramferry::engine {

class RegionTable {
 public:
  explicit RegionTable(absl::Span<const Region> regions);

  const Region* Find(uint32_t id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &regions_[it->second];
  }
  absl::Span<const Region> regions() const { return regions_; }
  // The position of a region Find returned in the caller's list.
  size_t IndexOf(const Region& region) const {
    return static_cast<size_t>(&region - regions_.data());
  }

  // The wire description of every region, in order.
  std::vector<proto::RegionInfo> Describe() const;
  // Whether `remote` names exactly these regions (same ids, lengths and
  // page sizes; order and names may differ). The error says what differs.
  absl::Status Matches(absl::Span<const proto::RegionInfo> remote) const;

 private:
  absl::Span<const Region> regions_;
  absl::flat_hash_map<uint32_t, size_t> by_id_;
};

// Checks a caller's region list: each region valid, ids unique.
absl::Status ValidateRegions(absl::Span<const Region> regions);

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_REGION_TABLE_H_
