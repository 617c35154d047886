// Fuzzes DecodeHelloReply, what a connecting end reads back (over TCP, or
// as RDMA connect/reject private data) and turns into a status it logs.
//
// Properties: an accepted reply has a real status code and a printable
// reason of at most kHelloReasonBytes; decode(encode(decode(x))) equals
// decode(x). The one documented exception: a reason that fills all 112
// bytes unterminated is accepted whole, but the encoder always keeps a NUL,
// so it comes back as its first 111 characters.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/handshake.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzHelloReply(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::HelloReply> r = proto::DecodeHelloReply(in);
  if (!r.ok()) return;
  FUZZ_CHECK(r->status <=
             static_cast<uint16_t>(absl::StatusCode::kUnauthenticated));
  FUZZ_CHECK(r->reason.size() <= proto::kHelloReasonBytes);
  for (char c : r->reason) FUZZ_CHECK(c >= 0x20 && c <= 0x7e);
  absl::Status s = proto::HelloReplyStatus(*r);
  FUZZ_CHECK(s.ok() == r->accepted());

  uint8_t out[proto::kHelloReplyBytes];
  proto::EncodeHelloReply(*r, absl::MakeSpan(out));
  absl::StatusOr<proto::HelloReply> again = proto::DecodeHelloReply(out);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->status == r->status);
  FUZZ_CHECK(again->capabilities == r->capabilities);
  FUZZ_CHECK(again->reason ==
             r->reason.substr(0, proto::kHelloReasonBytes - 1));
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzHelloReply({data, size});
  return 0;
}
