// DecodeChannelHello: the Hello's rules that depend on its transport, from
// the family table.
#include "channels/transport_family.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/handshake.h"
#include "tests/support/status_matchers.h"

namespace ramferry::channels {
namespace {

using ::testing::HasSubstr;

proto::Hello ValidHello(TransportKind kind) {
  proto::Hello h;
  h.role = proto::Role::kData;
  for (int i = 0; i < 16; ++i) h.session.bytes[i] = static_cast<uint8_t>(i + 1);
  h.channel_index = 3;
  h.channel_count = 4;
  h.max_packet_pages = 256;
  h.transport = static_cast<uint16_t>(kind);
  const TransportFamily* family = FindTransportFamily(kind);
  if (family != nullptr &&
      (family->capabilities & kCapChunkedRegistration) != 0) {
    h.rdma_chunk_bytes = 1 << 20;
  }
  return h;
}

std::vector<uint8_t> Encode(const proto::Hello& h) {
  std::vector<uint8_t> buf(proto::kHelloBytes);
  proto::EncodeHello(h, absl::MakeSpan(buf));
  return buf;
}

TEST(DecodeChannelHello, EveryFamilyAcceptsItsOwnHello) {
  for (const TransportFamily& f : TransportFamilies()) {
    absl::StatusOr<proto::Hello> h =
        DecodeChannelHello(Encode(ValidHello(f.kind)));
    ASSERT_OK(h) << f.name;
    EXPECT_EQ(h->transport, static_cast<uint16_t>(f.kind));
  }
}

TEST(DecodeChannelHello, RefusesATransportThisBuildLacks) {
  for (uint16_t id : {0, 5, 0xFFFF}) {
    proto::Hello h = ValidHello(TransportKind::kTcp);
    h.transport = id;
    absl::Status s = DecodeChannelHello(Encode(h)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_THAT(s.message(), HasSubstr("unknown transport")) << id;
  }
}

TEST(DecodeChannelHello, ChunkBytesAreReservedWhereTheFamilyDoesNotRegister) {
  for (const TransportFamily& f : TransportFamilies()) {
    if ((f.capabilities & kCapChunkedRegistration) != 0) continue;
    // Bytes 48..55 (RDMA chunk bytes) must be zero: even a valid size.
    proto::Hello h = ValidHello(f.kind);
    h.rdma_chunk_bytes = 1 << 20;
    absl::Status s = DecodeChannelHello(Encode(h)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << f.name;
    EXPECT_THAT(s.message(), HasSubstr("reserved")) << f.name;
  }
}

TEST(DecodeChannelHello, AChunkedFamilyNeedsAChunkSize) {
  for (const TransportFamily& f : TransportFamilies()) {
    if ((f.capabilities & kCapChunkedRegistration) == 0) continue;
    proto::Hello h = ValidHello(f.kind);
    h.rdma_chunk_bytes = 0;
    absl::Status s = DecodeChannelHello(Encode(h)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << f.name;
    EXPECT_THAT(s.message(), HasSubstr("not a power of two")) << f.name;
  }
}

}  // namespace
}  // namespace ramferry::channels
