#include "ramferry/pinning.h"

#include "channels/rdma/rdma.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/packet.h"
#include "tests/support/status_matchers.h"

namespace ramferry {
namespace {

SessionOptions Options(TransportKind kind, uint32_t channels,
                       uint32_t packet_pages, uint32_t header_slots) {
  SessionOptions o;
  o.transport = kind;
  o.channels = channels;
  o.packet_pages = packet_pages;
  o.header_slots = header_slots;
  return o;
}

TEST(PinningNeeds, BoundedByTheSocketSendBufferPerChannel) {
  // 512 KiB packets.
  SessionOptions o = Options(TransportKind::kTcpZeroCopy, 4, 128, 1024);
  PinningNeeds n = ComputePinningNeeds(o, 4096, 4 << 20, 1ull << 30);
  EXPECT_EQ(n.memlock_bytes, 4u * (4 << 20));
  EXPECT_EQ(n.sends_in_flight, 8u);
  EXPECT_EQ(n.optmem_bytes, 9u * 768);
  EXPECT_THAT(n.explanation, ::testing::HasSubstr("4 channels"));
}

TEST(PinningNeeds, BoundedByTheHeaderSlotsWhenTheyAreFew) {
  // 64 KiB packets.
  SessionOptions o = Options(TransportKind::kTcpZeroCopy, 2, 16, 4);
  PinningNeeds n = ComputePinningNeeds(o, 4096, 4 << 20, 1ull << 30);
  EXPECT_EQ(n.memlock_bytes, 2u * 4 * (64 << 10));
  EXPECT_EQ(n.sends_in_flight, 4u);
}

// rdma registers every region once a session (the channels share one
// protection domain), whatever the socket buffers, plus each channel's own
// header slots and receive buffers: a 16 GiB region over 4 channels pins
// 16 GiB and some, not the 16 MiB the socket formula gave it, nor the
// 64 GiB of a domain per channel.
TEST(PinningNeeds, RdmaPinsTheRegionsOnceASession) {
  SessionOptions o = Options(TransportKind::kRdma, 4, 128, 64);
  PinningNeeds n = ComputePinningNeeds(o, 4096, 4 << 20, 16ull << 30);
  const uint64_t header = proto::PacketHeaderBytes(128);
  const uint64_t per_channel =
      64 * header + channels::RdmaChannelBufferBytes(header);
  EXPECT_EQ(n.memlock_bytes, (16ull << 30) + 4 * per_channel);
  EXPECT_GT(channels::RdmaChannelBufferBytes(header), 256 * header)
      << "the receive buffers are counted";
  EXPECT_EQ(n.sends_in_flight, 0u) << "rdma holds no socket notifications";
  EXPECT_EQ(n.optmem_bytes, 0u);
  EXPECT_THAT(n.explanation, ::testing::HasSubstr("protection domain"));
  EXPECT_THAT(n.explanation, ::testing::HasSubstr("receive buffers"));
}

TEST(PinningNeeds, FixedBuffersAddTheRegionsOncePerChannel) {
  SessionOptions o = Options(TransportKind::kUringZeroCopy, 2, 16, 4);
  const uint64_t in_flight = uint64_t{2} * 4 * (64 << 10);
  EXPECT_EQ(ComputePinningNeeds(o, 4096, 4 << 20, 1ull << 30).memlock_bytes,
            in_flight);
  o.registered_buffers = true;
  PinningNeeds n = ComputePinningNeeds(o, 4096, 4 << 20, 1ull << 30);
  EXPECT_EQ(n.memlock_bytes, in_flight + 2 * (1ull << 30));
  EXPECT_THAT(n.explanation, ::testing::HasSubstr("fixed buffers"));
  // A transport without registered buffers ignores the option.
  o.transport = TransportKind::kTcpZeroCopy;
  EXPECT_EQ(ComputePinningNeeds(o, 4096, 4 << 20, 1ull << 30).memlock_bytes,
            in_flight);
}

TEST(PinningLimits, CopyingTransportNeedsNothing) {
  SessionOptions o;
  o.transport = TransportKind::kTcp;
  o.channels = 256;
  EXPECT_OK(CheckPinningLimits(o, 4096, 1ull << 40));
}

}  // namespace
}  // namespace ramferry
