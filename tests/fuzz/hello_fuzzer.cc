// Fuzzes DecodeChannelHello (DecodeHello, then the transport's rules), the
// first bytes every connection sends (TCP stream or RDMA connect private
// data), before anything about the peer is known.
//
// Properties: an accepted Hello obeys every rule the acceptor relies on
// (role, nonzero session, known auth method, index < count <= kMaxChannels,
// page bound, a known transport, a chunk size exactly where the transport
// registers in chunks); re-encoding it gives back the 56 input bytes
// exactly.
#include <cstdint>
#include <cstring>

#include "absl/status/statusor.h"
#include "channels/transport_family.h"
#include "proto/auth.h"
#include "proto/handshake.h"
#include "proto/packet.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

void FuzzHello(absl::Span<const uint8_t> in) {
  absl::StatusOr<proto::Hello> h = channels::DecodeChannelHello(in);
  if (!h.ok()) return;
  const channels::TransportFamily* family =
      channels::FindTransportFamily(h->transport);
  FUZZ_CHECK(family != nullptr);
  FUZZ_CHECK(in.size() >= proto::kHelloBytes);
  FUZZ_CHECK(h->role == proto::Role::kControl ||
             h->role == proto::Role::kData || h->role == proto::Role::kUrgent);
  FUZZ_CHECK(!h->session.is_zero());
  FUZZ_CHECK(h->channel_count >= 1 && h->channel_count <= proto::kMaxChannels);
  FUZZ_CHECK(h->channel_index < h->channel_count);
  FUZZ_CHECK(h->max_packet_pages >= 1 &&
             h->max_packet_pages <= proto::kMaxPacketPagesLimit);
  if ((family->capabilities & channels::kCapChunkedRegistration) != 0) {
    FUZZ_CHECK(h->rdma_chunk_bytes >= proto::kMinRdmaChunkBytes &&
               h->rdma_chunk_bytes <= proto::kMaxRdmaChunkBytes &&
               (h->rdma_chunk_bytes & (h->rdma_chunk_bytes - 1)) == 0);
  } else {
    FUZZ_CHECK(h->rdma_chunk_bytes == 0);
  }

  FUZZ_CHECK(h->auth == proto::kAuthNone || h->auth == proto::kAuthHmacSha256);

  uint8_t out[proto::kHelloBytes];
  proto::EncodeHello(*h, absl::MakeSpan(out));
  FUZZ_CHECK(std::memcmp(out, in.data(), proto::kHelloBytes) == 0);
  absl::StatusOr<proto::Hello> again = proto::DecodeHello(out);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->role == h->role && again->session == h->session &&
             again->channel_index == h->channel_index &&
             again->channel_count == h->channel_count &&
             again->capabilities == h->capabilities &&
             again->max_packet_pages == h->max_packet_pages &&
             again->transport == h->transport &&
             again->rdma_chunk_bytes == h->rdma_chunk_bytes &&
             again->auth == h->auth);
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzHello({data, size});
  return 0;
}
