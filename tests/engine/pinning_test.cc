#include "ramferry/pinning.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ramferry {
namespace {

TEST(PinningNeeds, BoundedByTheSocketSendBufferPerChannel) {
  SessionOptions o;
  o.transport = TransportKind::kTcpZeroCopy;
  o.channels = 4;
  o.packet_pages = 128;  // 512 KiB packets
  o.header_slots = 1024;
  PinningNeeds n = ComputePinningNeeds(o, 4096, 4 << 20);
  EXPECT_EQ(n.memlock_bytes, 4u * (4 << 20));
  EXPECT_EQ(n.sends_in_flight, 8u);
  EXPECT_EQ(n.optmem_bytes, 9u * 768);
  EXPECT_THAT(n.explanation, ::testing::HasSubstr("4 channels"));
}

TEST(PinningNeeds, BoundedByTheHeaderSlotsWhenTheyAreFew) {
  SessionOptions o;
  o.transport = TransportKind::kTcpZeroCopy;
  o.channels = 2;
  o.packet_pages = 16;  // 64 KiB packets
  o.header_slots = 4;
  PinningNeeds n = ComputePinningNeeds(o, 4096, 4 << 20);
  EXPECT_EQ(n.memlock_bytes, 2u * 4 * (64 << 10));
  EXPECT_EQ(n.sends_in_flight, 4u);
}

TEST(PinningLimits, CopyingTransportNeedsNothing) {
  SessionOptions o;
  o.transport = TransportKind::kTcp;
  o.channels = 256;
  EXPECT_TRUE(CheckPinningLimits(o, 4096).ok());
}

}  // namespace
}  // namespace ramferry
