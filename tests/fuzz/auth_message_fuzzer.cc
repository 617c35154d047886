// Fuzzes DecodeAuthChallenge and DecodeAuthProof, the two messages a keyed
// acceptor reads or writes before a connection is admitted, so the ones an
// unauthenticated peer controls completely. The first input byte picks the
// decoder.
//
// Properties: an accepted message came from at least its fixed size of
// input, and re-encoding it gives back exactly those bytes (every field is
// either carried or checked to be zero).
#include <cstdint>
#include <cstring>

#include "absl/status/statusor.h"
#include "proto/auth.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzChallenge(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::AuthChallenge> c = proto::DecodeAuthChallenge(in);
  if (!c.ok()) return;
  FUZZ_CHECK(in.size() >= proto::kAuthChallengeBytes);
  uint8_t out[proto::kAuthChallengeBytes];
  proto::EncodeAuthChallenge(*c, absl::MakeSpan(out));
  FUZZ_CHECK(std::memcmp(out, in.data(), sizeof(out)) == 0);
}

void FuzzProof(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::AuthProof> p = proto::DecodeAuthProof(in);
  if (!p.ok()) return;
  FUZZ_CHECK(in.size() >= proto::kAuthProofBytes);
  uint8_t out[proto::kAuthProofBytes];
  proto::EncodeAuthProof(*p, absl::MakeSpan(out));
  FUZZ_CHECK(std::memcmp(out, in.data(), sizeof(out)) == 0);
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  absl::Span<const uint8_t> in(data + 1, size - 1);
  if (data[0] & 1) {
    ramferry::fuzz::FuzzProof(in);
  } else {
    ramferry::fuzz::FuzzChallenge(in);
  }
  return 0;
}
