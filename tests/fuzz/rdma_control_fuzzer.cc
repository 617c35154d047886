// Fuzzes DecodeRdmaControl, the chunk-registration and key messages that
// share an RDMA channel's receive queue with packet headers.
//
// Properties: IsRdmaControl agrees with the magic of every accepted
// message; an accepted message has 1..kMaxRdmaControlEntries entries, all
// in the vector its type uses and none in the others (CREDITS: exactly one
// grant, never of zero receives), fits the receive
// buffer (RdmaControlMaxBytes), and re-encodes to the input byte for byte.
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/rdma_control.h"
#include "tests/fuzz/control_round_trip.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

size_t Entries(const proto::RdmaControl& c) {
  switch (c.type) {
    case proto::RdmaControlType::kRegionKeys:
      FUZZ_CHECK(c.chunks.empty() && c.results.empty());
      return c.region_keys.size();
    case proto::RdmaControlType::kRegisterRequest:
    case proto::RdmaControlType::kCompress:
      FUZZ_CHECK(c.region_keys.empty() && c.results.empty());
      return c.chunks.size();
    case proto::RdmaControlType::kRegisterResult:
      FUZZ_CHECK(c.region_keys.empty() && c.chunks.empty());
      return c.results.size();
    case proto::RdmaControlType::kCredits:
      FUZZ_CHECK(c.region_keys.empty() && c.chunks.empty() &&
                 c.results.empty());
      FUZZ_CHECK(c.credits > 0);
      return 1;
  }
  FUZZ_CHECK(false && "decoded an unknown RDMA control type");
  return 0;
}

void FuzzRdmaControl(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::RdmaControl> c = proto::DecodeRdmaControl(in);
  if (!c.ok()) return;
  FUZZ_CHECK(proto::IsRdmaControl(in));
  const size_t n = Entries(*c);
  FUZZ_CHECK(n >= 1 && n <= proto::kMaxRdmaControlEntries);
  FUZZ_CHECK(in.size() <= proto::RdmaControlMaxBytes());

  std::vector<uint8_t> out = proto::EncodeRdmaControl(*c);
  FUZZ_CHECK(SameBytes(out, in));
  absl::StatusOr<proto::RdmaControl> again = proto::DecodeRdmaControl(out);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->type == c->type && Entries(*again) == n);
  FUZZ_CHECK(SameBytes(proto::EncodeRdmaControl(*again), out));
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzRdmaControl({data, size});
  return 0;
}
