#include "engine/region_table.h"

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace ramferry::engine {

RegionTable::RegionTable(absl::Span<const Region> regions) : regions_(regions) {
  for (size_t i = 0; i < regions.size(); ++i) by_id_[regions[i].id] = i;
}

std::vector<proto::RegionInfo> RegionTable::Describe() const {
  std::vector<proto::RegionInfo> out;
  out.reserve(regions_.size());
  for (const Region& r : regions_) {
    out.push_back({r.id, r.page_size, r.length, r.name});
  }
  return out;
}

absl::Status RegionTable::Matches(
    absl::Span<const proto::RegionInfo> remote) const {
  if (remote.size() != regions_.size()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("source offers %d regions, destination has %d",
                        remote.size(), regions_.size()));
  }
  for (const proto::RegionInfo& r : remote) {
    const Region* local = Find(r.id);
    if (local == nullptr) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "source region %d ('%s') has no destination region", r.id, r.name));
    }
    if (local->length != r.length || local->page_size != r.page_size) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "region %d: source has %d bytes in %d-byte pages, destination %d "
          "bytes in %d-byte pages",
          r.id, r.length, r.page_size, local->length, local->page_size));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRegions(absl::Span<const Region> regions) {
  if (regions.empty()) {
    return absl::InvalidArgumentError("no regions to transfer");
  }
  if (regions.size() > proto::kMaxRegions) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d regions; at most %d", regions.size(), proto::kMaxRegions));
  }
  absl::flat_hash_map<uint32_t, size_t> seen;
  for (size_t i = 0; i < regions.size(); ++i) {
    RAMFERRY_RETURN_IF_ERROR(ValidateRegion(regions[i]));
    if (!seen.emplace(regions[i].id, i).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("region id %d is used twice", regions[i].id));
    }
  }
  return absl::OkStatus();
}

}  // namespace ramferry::engine
