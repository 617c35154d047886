// Fuzzes DecodeRegionTable, the source's description of its memory that the
// destination matches against its own regions before any page moves.
//
// Properties: an accepted table has 1..kMaxRegions entries, unique ids, and
// every entry passes ValidateRegionInfo; re-encoding it gives back the
// payload byte for byte.
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "proto/control.h"
#include "tests/fuzz/control_round_trip.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzRegionTable(absl::Span<const uint8_t> in) {
  absl::StatusOr<std::vector<proto::RegionInfo>> t =
      proto::DecodeRegionTable(in);
  if (!t.ok()) return;
  // None is a session of streams' table (each end checks it against its
  // own).
  FUZZ_CHECK(t->size() <= proto::kMaxRegions);
  absl::flat_hash_set<uint32_t> ids;
  for (const proto::RegionInfo& r : *t) {
    FUZZ_CHECK(proto::ValidateRegionInfo(r).ok());
    FUZZ_CHECK(ids.insert(r.id).second);
  }

  std::vector<uint8_t> frame = proto::EncodeRegionTable(*t);
  absl::Span<const uint8_t> payload =
      EncodedPayload(frame, proto::ControlType::kRegionTable);
  FUZZ_CHECK(SameBytes(payload, in));
  absl::StatusOr<std::vector<proto::RegionInfo>> again =
      proto::DecodeRegionTable(payload);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(*again == *t);
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzRegionTable({data, size});
  return 0;
}
