// Capabilities match behaviour: each transport's send side, opened the way
// the engine opens it, on a real loopback TCP connection, against the
// receive side every socket transport shares. A capability a transport
// advertises must show in what it does, and one it lacks must not.
#include <sys/uio.h>

#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "channels/transport.h"
#include "gtest/gtest.h"
#include "ramferry/region.h"
#include "tests/conformance/conformance_support.h"
#include "tests/support/test_support.h"

namespace ramferry::conformance {
namespace {

using channels::Transport;
using channels::TransportOptions;

constexpr uint64_t kRegionBytes = 1 << 20;
constexpr uint64_t kChunk = 64 << 10;

class CapabilityConformance : public ::testing::TestWithParam<TransportKind> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ParseTransportKind(TransportKindName(GetParam())).ok());
    if (std::string why = WhyUnavailable(GetParam()); !why.empty()) {
      GTEST_SKIP() << why;
    }
    src_ = testing::MakeRegion(7, kRegionBytes, 77, /*fill=*/true);
    options_.max_header_bytes = kTagHeaderBytes;
    options_.stall_timeout = absl::Seconds(10);
  }

  // Opens the pair with options_; the transport under test is tx().
  void Open() {
    absl::StatusOr<TransportPair> pair =
        OpenTransportPair(GetParam(), options_);
    ASSERT_TRUE(pair.ok()) << pair.status();
    pair_ = std::move(*pair);
    ASSERT_EQ(pair_.tx->kind(), GetParam());
    caps_ = pair_.tx->capabilities();
  }
  Transport& tx() { return *pair_.tx; }
  bool Has(uint32_t cap) const { return (caps_ & cap) != 0; }
  const uint8_t* base() const { return src_.memory->data(); }

  testing::TestRegion src_;
  TransportOptions options_;
  TransportPair pair_;
  uint32_t caps_ = 0;
};

std::vector<uint32_t> Iota(uint32_t n) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST_P(CapabilityConformance, AdvertisesKnownBitsAndNoInlineSends) {
  ASSERT_NO_FATAL_FAILURE(Open());
  constexpr uint32_t kKnown =
      channels::kCapZeroCopy | channels::kCapHeaderSlots |
      channels::kCapCompletionPolicies | channels::kCapRegisteredBuffers |
      channels::kCapInlineSends | channels::kCapBatchedSubmit;
  EXPECT_EQ(caps_ & ~kKnown, 0u) << "unknown capability bits";
  // Following each policy means reusing header slots by completion.
  EXPECT_EQ(Has(channels::kCapCompletionPolicies),
            Has(channels::kCapHeaderSlots));
  switch (GetParam()) {
    case TransportKind::kTcp:
      EXPECT_EQ(caps_, 0u);
      break;
    case TransportKind::kTcpZeroCopy:
      EXPECT_EQ(caps_, channels::kCapZeroCopy | channels::kCapHeaderSlots |
                           channels::kCapCompletionPolicies);
      break;
    case TransportKind::kUringZeroCopy:
      EXPECT_EQ(caps_, channels::kCapZeroCopy | channels::kCapHeaderSlots |
                           channels::kCapCompletionPolicies |
                           channels::kCapRegisteredBuffers |
                           channels::kCapBatchedSubmit);
      break;
    default:
      break;
  }
  // Inline sends are RDMA's (small sends inside the work request); no
  // socket transport may claim them.
  if (GetParam() != TransportKind::kRdma) {
    EXPECT_FALSE(Has(channels::kCapInlineSends));
  }
}

// kCapZeroCopy <=> payload sends asked for zero copy; then every one of
// them completes by Flush. 40 packets through 4 header slots: headers are
// reused ten times, and still arrive intact.
TEST_P(CapabilityConformance, ZeroCopyMatchesZeroCopySends) {
  options_.header_slots = 4;
  ASSERT_NO_FATAL_FAILURE(Open());
  constexpr uint32_t kPackets = 40;
  PacketReader reader(pair_.rx.get(), base(), kPackets);
  for (uint32_t i = 0; i < kPackets; ++i) {
    const uint64_t off = (i * kChunk) % kRegionBytes;
    ASSERT_TRUE(SendTagged(tx(), i, 7, base(), {{off, kChunk}}).ok());
  }
  ASSERT_TRUE(tx().Flush().ok());
  ASSERT_TRUE(reader.Finish().ok());
  EXPECT_EQ(reader.tags(), Iota(kPackets)) << "a header was overwritten";
  EXPECT_EQ(reader.corrupt(), 0u);

  const channels::TransportStats& s = tx().stats();
  EXPECT_EQ(Has(channels::kCapZeroCopy), s.zc_sends.get() > 0)
      << "zc_sends=" << s.zc_sends.get();
  if (Has(channels::kCapZeroCopy)) {
    EXPECT_EQ(s.zc_sends.get(), kPackets);
    EXPECT_EQ(s.zc_completions.get(), s.zc_sends.get());
    EXPECT_LE(s.zc_copied.get(), s.zc_completions.get());
    EXPECT_GE(s.zc_notifications.get(), 1u);
  } else {
    EXPECT_EQ(s.zc_completions.get(), 0u);
    EXPECT_EQ(s.zc_notifications.get(), 0u);
  }
  EXPECT_EQ(s.short_sends.get(), 0u);
  EXPECT_EQ(s.send_calls.get(), kPackets);
}

// kCapHeaderSlots => each packet's header has its own buffer until the
// array wraps, and after Flush() the first slot comes back. Without it,
// no slot is ever counted in flight.
TEST_P(CapabilityConformance, HeaderSlotsRotateAndReturnAfterFlush) {
  constexpr uint32_t kSlots = 4;
  options_.header_slots = kSlots;
  options_.completion = CompletionPolicy::kSlot;  // no flush at wrap
  ASSERT_NO_FATAL_FAILURE(Open());
  PacketReader reader(pair_.rx.get(), base(), kSlots + 2);
  std::vector<const uint8_t*> used;
  for (uint32_t i = 0; i < kSlots; ++i) {
    const uint8_t* h = nullptr;
    ASSERT_TRUE(
        SendTagged(tx(), i, 7, base(), {{i * kChunk, kChunk}}, &h).ok());
    used.push_back(h);
  }
  ASSERT_TRUE(tx().Flush().ok());
  const uint8_t* again = nullptr;
  ASSERT_TRUE(SendTagged(tx(), kSlots, 7, base(), {{0, kChunk}}, &again).ok());
  const uint8_t* next = nullptr;
  ASSERT_TRUE(
      SendTagged(tx(), kSlots + 1, 7, base(), {{kChunk, kChunk}}, &next).ok());
  ASSERT_TRUE(tx().Flush().ok());
  ASSERT_TRUE(reader.Finish().ok());
  EXPECT_EQ(reader.tags(), Iota(kSlots + 2));
  EXPECT_EQ(reader.corrupt(), 0u);

  const channels::TransportStats& s = tx().stats();
  if (Has(channels::kCapHeaderSlots)) {
    EXPECT_EQ(std::set<const uint8_t*>(used.begin(), used.end()).size(), kSlots)
        << "two packets in flight shared a header buffer";
    EXPECT_EQ(again, used[0]) << "after Flush the array starts over";
    EXPECT_EQ(next, used[1]);
    EXPECT_GE(s.max_slots_in_flight.get(), 1u);
    EXPECT_LE(s.max_slots_in_flight.get(), kSlots);
    EXPECT_EQ(s.flushes.get(), 2u);  // the two calls above, none at wrap
  } else {
    EXPECT_EQ(s.max_slots_in_flight.get(), 0u);
    EXPECT_EQ(s.flushes.get(), 0u);
  }
}

// kCapBatchedSubmit => packets queue until Submit(), and N of them cost
// fewer submission syscalls than N. Without it each packet is its own
// syscall, made before SendPacket returns.
TEST_P(CapabilityConformance, BatchedSubmitSharesSyscalls) {
  constexpr uint32_t kPackets = 16;
  options_.header_slots = 64;  // no wrap: nothing forces an early submit
  options_.completion = CompletionPolicy::kSlot;
  ASSERT_NO_FATAL_FAILURE(Open());
  PacketReader reader(pair_.rx.get(), base(), kPackets);
  const channels::TransportStats& s = tx().stats();
  for (uint32_t i = 0; i < kPackets; ++i) {
    ASSERT_TRUE(SendTagged(tx(), i, 7, base(), {{i * kChunk, kChunk}}).ok());
  }
  const uint64_t sent_before_submit = s.send_calls.get();
  const uint64_t submits_before_submit = s.submit_calls.get();
  ASSERT_TRUE(tx().Submit().ok());
  const uint64_t submits = s.submit_calls.get();
  const uint64_t sends = s.send_calls.get();
  ASSERT_TRUE(tx().Flush().ok());
  ASSERT_TRUE(reader.Finish().ok());
  EXPECT_EQ(reader.tags(), Iota(kPackets));
  EXPECT_EQ(reader.corrupt(), 0u);

  EXPECT_EQ(sends, kPackets);
  if (Has(channels::kCapBatchedSubmit)) {
    EXPECT_EQ(sent_before_submit, 0u) << "sent before Submit()";
    EXPECT_EQ(submits_before_submit, 0u);
    EXPECT_LT(submits, kPackets);
    EXPECT_EQ(submits, 1u) << "16 packets fit one submission";
  } else {
    EXPECT_EQ(sent_before_submit, kPackets);
    EXPECT_EQ(submits_before_submit, kPackets);
    EXPECT_EQ(submits, kPackets) << "Submit() has nothing to submit";
  }
}

// kCapRegisteredBuffers => with registered_buffers and the payload memory
// registered, packets (two page runs each) arrive intact. Without it,
// RegisterRegion is accepted and changes nothing.
TEST_P(CapabilityConformance, RegisteredBuffersDeliverIntact) {
  options_.registered_buffers = true;
  options_.header_slots = 8;
  ASSERT_NO_FATAL_FAILURE(Open());
  absl::Status reg = tx().RegisterRegion(7, src_.memory->data(), kRegionBytes);
  ASSERT_TRUE(reg.ok()) << reg;
  constexpr uint32_t kPackets = 24;
  PacketReader reader(pair_.rx.get(), base(), kPackets);
  for (uint32_t i = 0; i < kPackets; ++i) {
    // Two runs, out of order and apart: [i*8K, +8K) then [512K + i*4K, +12K).
    const std::vector<PayloadRun> runs = {
        {(kRegionBytes / 2) + i * 4096, 12288}, {i * 8192, 8192}};
    ASSERT_TRUE(SendTagged(tx(), i, 7, base(), runs).ok());
  }
  ASSERT_TRUE(tx().Flush().ok());
  ASSERT_TRUE(reader.Finish().ok());
  EXPECT_EQ(reader.tags(), Iota(kPackets));
  EXPECT_EQ(reader.corrupt(), 0u);

  const channels::TransportStats& s = tx().stats();
  EXPECT_EQ(s.short_sends.get(), 0u);
  EXPECT_EQ(s.zc_completions.get(), s.zc_sends.get());
  if (Has(channels::kCapRegisteredBuffers)) {
    EXPECT_GT(s.zc_sends.get(), 0u);
    if (GetParam() == TransportKind::kUringZeroCopy) {
      // A copied header, then one fixed zero-copy send per run.
      EXPECT_EQ(s.zc_sends.get(), 2 * kPackets);
      EXPECT_EQ(s.send_calls.get(), 3 * kPackets);
    }
  } else if (Has(channels::kCapZeroCopy)) {
    EXPECT_EQ(s.zc_sends.get(), kPackets) << "one send per packet, as ever";
    EXPECT_EQ(s.send_calls.get(), kPackets);
  } else {
    EXPECT_EQ(s.zc_sends.get(), 0u);
    EXPECT_EQ(s.send_calls.get(), kPackets);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, CapabilityConformance,
                         ::testing::ValuesIn(kAllTransports),
                         [](const auto& info) { return TestName(info.param); });

}  // namespace
}  // namespace ramferry::conformance
