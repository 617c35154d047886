// Capabilities match behaviour: each transport's send side, opened the way
// the engine opens it, on a real loopback TCP connection, against the
// receive side every socket transport shares; rdma's on one queue pair on
// the RDMA device ($RXE_IP), against its own receive side. A capability a
// transport advertises must show in what it does, and one it lacks must
// not.
//
// rdma moves pages differently: RDMA WRITEs place them straight into the
// receive side's registered region at the packet's payload offsets, and
// ReadPayload reads nothing. So for rdma both ends register the region
// (same id) before data moves, and the reader checks the destination
// region itself (PacketReader's `dest`). Where a check names something
// RDMA does not have (socket syscalls, MSG_ZEROCOPY notifications), the
// rdma branch says why and checks the nearest real property instead.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "channels/channel_factory.h"
#include "channels/transport.h"
#include "channels/transport_family.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ramferry/options.h"
#include "ramferry/region.h"
#include "tests/conformance/conformance_support.h"
#include "tests/support/fake_source.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry::conformance {
namespace {

using channels::Transport;
using channels::TransportOptions;
using ::ramferry::testing::StatusIs;
using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr uint64_t kRegionBytes = 1 << 20;
constexpr uint64_t kChunk = 64 << 10;

class CapabilityConformance : public ::testing::TestWithParam<TransportKind> {
 protected:
  void TearDown() override { Close(); }
  void SetUp() override {
    ASSERT_OK(ParseTransportKind(TransportKindName(GetParam())));
    if (std::string why = WhyUnavailable(GetParam()); !why.empty()) {
      GTEST_SKIP() << why;
    }
    src_ = testing::MakeRegion(7, kRegionBytes, 77, /*fill=*/true);
    options_.max_header_bytes = kTagHeaderBytes;
    options_.stall_timeout = absl::Seconds(10);
  }

  // Opens the pair with options_ (closing an earlier one); the transport
  // under test is tx(). rdma: also registers region 7, the source on tx
  // and a fresh zeroed destination on rx.
  void Open(const RdmaPairOptions& rdma = {}) {
    Close();
    absl::StatusOr<TransportPair> pair =
        OpenTransportPair(GetParam(), options_, rdma);
    ASSERT_OK(pair);
    pair_ = std::move(*pair);
    ASSERT_EQ(pair_.tx->kind(), GetParam());
    caps_ = pair_.tx->capabilities();
    if (is_rdma()) {
      dst_ = testing::MakeRegion(7, kRegionBytes);
      absl::Status s =
          tx().RegisterRegion(7, src_.memory->data(), kRegionBytes);
      ASSERT_OK(s) << "tx";
      s = pair_.rx->RegisterRegion(7, dst_.memory->data(), kRegionBytes);
      ASSERT_OK(s) << "rx";
    }
  }
  // Receive side first, then the send side, then the listener.
  void Close() {
    pair_.rx.reset();
    pair_.tx.reset();
    pair_.rdma_listener.reset();
  }
  Transport& tx() { return *pair_.tx; }
  Transport& rx() { return *pair_.rx; }
  bool Has(uint32_t cap) const { return (caps_ & cap) != 0; }
  bool is_rdma() const { return GetParam() == TransportKind::kRdma; }
  const uint8_t* base() const { return src_.memory->data(); }
  // Where the reader finds the payload: rdma's registered destination, or
  // (nullptr) the stream.
  uint8_t* dest() { return is_rdma() ? dst_.memory->data() : nullptr; }

  testing::TestRegion src_;
  testing::TestRegion dst_;  // rdma: outlives the pair that registered it
  TransportOptions options_;
  TransportPair pair_;
  uint32_t caps_ = 0;
};

std::vector<uint32_t> Iota(uint32_t n) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST_P(CapabilityConformance, AdvertisesKnownBitsInlineSendsOnlyOnVerbs) {
  ASSERT_NO_FATAL_FAILURE(Open());
  constexpr uint32_t kKnown =
      channels::kCapZeroCopy | channels::kCapHeaderSlots |
      channels::kCapCompletionPolicies | channels::kCapRegisteredBuffers |
      channels::kCapInlineSends | channels::kCapBatchedSubmit |
      channels::kCapRemotePlacement | channels::kCapOwnsConnection |
      channels::kCapAuthenticatedHello | channels::kCapPinsSendMemory |
      channels::kCapChunkedRegistration;
  EXPECT_EQ(caps_ & ~kKnown, 0u) << "unknown capability bits";
  // What the engine decides by before a connection exists is what the
  // open transport promises.
  EXPECT_EQ(caps_, channels::StaticCapabilities(GetParam()));
  // Following each policy means reusing header slots by completion.
  EXPECT_EQ(Has(channels::kCapCompletionPolicies),
            Has(channels::kCapHeaderSlots));
  // Zero-copy keeps the pages pinned until the send completes.
  EXPECT_EQ(Has(channels::kCapPinsSendMemory), Has(channels::kCapZeroCopy));
  // Every family proves a key: a stream socket carries the whole
  // challenge-response, rdma splits it between its accept and its first
  // SEND (channels/rdma/auth.h).
  EXPECT_TRUE(Has(channels::kCapAuthenticatedHello));
  constexpr uint32_t kSocket = channels::kCapAuthenticatedHello;
  constexpr uint32_t kZeroCopySocket =
      kSocket | channels::kCapZeroCopy | channels::kCapHeaderSlots |
      channels::kCapCompletionPolicies | channels::kCapPinsSendMemory;
  switch (GetParam()) {
    case TransportKind::kTcp:
      EXPECT_EQ(caps_, kSocket);
      break;
    case TransportKind::kTcpZeroCopy:
      EXPECT_EQ(caps_, kZeroCopySocket);
      break;
    case TransportKind::kUringZeroCopy:
      EXPECT_EQ(caps_, kZeroCopySocket | channels::kCapRegisteredBuffers |
                           channels::kCapBatchedSubmit);
      break;
    case TransportKind::kRdma:
      // Each packet is its own ibv_post_send chain (BatchedSubmitShares-
      // Syscalls checks it): no kCapBatchedSubmit.
      EXPECT_EQ(
          caps_,
          channels::kCapZeroCopy | channels::kCapHeaderSlots |
              channels::kCapCompletionPolicies |
              channels::kCapRegisteredBuffers | channels::kCapInlineSends |
              channels::kCapRemotePlacement | channels::kCapOwnsConnection |
              channels::kCapAuthenticatedHello | channels::kCapPinsSendMemory |
              channels::kCapChunkedRegistration);
      break;
    default:
      break;
  }
  // Inline sends are RDMA's (small sends inside the work request); no
  // socket transport may claim them.
  if (GetParam() != TransportKind::kRdma) {
    EXPECT_FALSE(Has(channels::kCapInlineSends));
  } else {
    EXPECT_TRUE(Has(channels::kCapInlineSends));
    EXPECT_FALSE(Has(channels::kCapBatchedSubmit));
  }
}

// kCapInlineSends => small sends go inline, but never one larger than the
// room the queue pair GRANTED (which may be less than asked, or none).
// Header-only packets need no registration, so their SENDs are the only
// sends: every one inline when the granted room holds a header, none
// otherwise. rdma asks for 512 bytes (rxe grants room for a 64-byte
// header) and for none (then a header does not fit), so both sides are
// seen. Without the capability nothing is ever counted inline.
TEST_P(CapabilityConformance, InlineSendsOnlyWithinTheGrantedRoom) {
  constexpr uint32_t kPackets = 8;
  const std::vector<uint32_t> asks =
      // 1 MiB is more than any provider has: it must settle for what it has.
      is_rdma() ? std::vector<uint32_t>{512, 0, 1 << 20}
                : std::vector<uint32_t>{512};
  for (uint32_t ask : asks) {
    SCOPED_TRACE(absl::StrCat("inline room asked: ", ask));
    RdmaPairOptions rdma;
    rdma.max_inline = ask;
    ASSERT_NO_FATAL_FAILURE(Open(rdma));
    PacketReader reader(pair_.rx.get(), base(), kPackets, dest());
    for (uint32_t i = 0; i < kPackets; ++i) {
      ASSERT_OK(SendTagged(tx(), i, 7, base(), {}));
    }
    ASSERT_OK(tx().Flush());
    ASSERT_OK(reader.Finish());
    EXPECT_EQ(reader.tags(), Iota(kPackets));

    const channels::TransportStats& s = tx().stats();
    const channels::TransportStats& r = rx().stats();
    if (Has(channels::kCapInlineSends)) {
      const uint64_t granted = s.inline_granted.get();
      EXPECT_LE(s.inline_max_bytes.get(), granted);
      EXPECT_LE(r.inline_max_bytes.get(), r.inline_granted.get());
      if (granted >= kTagHeaderBytes) {
        EXPECT_EQ(s.inline_sends.get(), kPackets);
        EXPECT_EQ(s.inline_max_bytes.get(), kTagHeaderBytes);
      } else {
        EXPECT_EQ(s.inline_sends.get(), 0u) << "granted " << granted;
        EXPECT_EQ(s.inline_max_bytes.get(), 0u);
      }
      if (ask >= kTagHeaderBytes) {
        EXPECT_GE(granted, kTagHeaderBytes) << "the inline side went unseen";
      } else {
        EXPECT_LT(granted, kTagHeaderBytes) << "the copied side went unseen";
      }
      // A header-only SEND moves no payload: it is no zero-copy send, and
      // its completion is no zero-copy completion ("of those",
      // channels/transport.h; HeaderSlots::Complete's zero_copy=false).
      EXPECT_EQ(s.zc_sends.get(), 0u);
      EXPECT_EQ(s.zc_completions.get(), s.zc_sends.get())
          << "header-only packets counted as zero-copy completions";
    } else {
      EXPECT_EQ(s.inline_sends.get(), 0u);
      EXPECT_EQ(s.inline_max_bytes.get(), 0u);
      EXPECT_EQ(s.inline_granted.get(), 0u);
    }
  }
}

// A receive side idle at a packet boundary may wait for ever, but not for
// a peer that has left: the close (a socket's EOF, rdma's DISCONNECTED
// event) ends the read with an error.
TEST_P(CapabilityConformance, APeerThatLeavesEndsAWaitingRead) {
  ASSERT_NO_FATAL_FAILURE(Open());
  absl::Status read;
  absl::Notification returned;
  std::thread reader([&] {
    uint8_t byte[1];
    read = rx().ReadExact(absl::MakeSpan(byte), /*at_packet_boundary=*/true);
    returned.Notify();
  });
  pair_.tx.reset();
  const bool ended = returned.WaitForNotificationWithTimeout(absl::Seconds(10));
  if (!ended) rx().Shutdown();  // so the test ends either way
  reader.join();
  EXPECT_TRUE(ended) << "the read still waited 10 s after its peer left";
  // The peer's close, not this end's own shutdown (ABORTED). On rdma the
  // read may also end on a control send (credits returned) that the
  // departed peer's queue pair failed: a TSan run in the VM saw "RDMA
  // control send failed: remote operation error".
  EXPECT_THAT(read, StatusIs(absl::StatusCode::kUnavailable,
                             AnyOf(HasSubstr("closed by peer"),
                                   HasSubstr("disconnected"),
                                   HasSubstr("remote operation error"))));
}

// The RNR NAKs an RDMA device's requesters received (rxe's hardware
// counter), or -1 where the device has no such counter.
int64_t RnrNaksReceived() {
  const char* dev = std::getenv("RXE_DEVICE");
  const std::string path =
      absl::StrCat("/sys/class/infiniband/", dev != nullptr ? dev : "rxe0",
                   "/ports/1/hw_counters/rcvd_rnr_err");
  std::ifstream in(path);
  int64_t n = -1;
  if (!(in >> n)) return -1;
  return n;
}

// A destination that reads slowly holds its source back without loss or
// reordering. On rdma the source waits for receive credits rather than
// sending into receives the destination has not posted: 16 receives, 120
// header-only packets read 2 ms apart, and no SEND is refused (rxe counts
// the RNR NAKs). Without credits, as an older peer has it, the same run
// costs RNR NAKs: the counter sees the difference.
TEST_P(CapabilityConformance, ASlowReaderHoldsTheSenderBackWithinItsReceives) {
  constexpr uint32_t kPackets = 120;
  const std::vector<bool> credit_modes =
      is_rdma() ? std::vector<bool>{true, false} : std::vector<bool>{true};
  for (bool credits : credit_modes) {
    SCOPED_TRACE(absl::StrCat("credits: ", credits));
    RdmaPairOptions rdma;
    rdma.credits = credits;
    rdma.recv_queue = 16;
    ASSERT_NO_FATAL_FAILURE(Open(rdma));
    const int64_t rnr_before = is_rdma() ? RnrNaksReceived() : -1;
    const absl::Time start = absl::Now();
    PacketReader reader(pair_.rx.get(), base(), kPackets, dest(),
                        absl::Milliseconds(2));
    for (uint32_t i = 0; i < kPackets; ++i) {
      ASSERT_OK(SendTagged(tx(), i, 7, base(), {}));
    }
    ASSERT_OK(tx().Flush());
    ASSERT_OK(reader.Finish());
    EXPECT_EQ(reader.tags(), Iota(kPackets));
    if (!is_rdma()) continue;
    const channels::TransportStats& s = tx().stats();
    const channels::TransportStats& r = rx().stats();
    const int64_t rnr = RnrNaksReceived() - rnr_before;
    std::cout << absl::StreamFormat(
        "[ credits ] %s: %d packets into 16 receives read 2 ms apart in "
        "%s: %d posts waited for credits, %d RNR NAKs\n",
        credits ? "on" : "off", kPackets,
        absl::FormatDuration(absl::Now() - start), s.rdma_credit_waits.get(),
        rnr);
    if (credits) {
      EXPECT_GT(s.rdma_credit_waits.get(), 0u)
          << "the source never ran out of the 16 credits";
      // The grant, then a return per batch of 2 receives (16 / 8); the
      // last packet's receive is still held (no read came after it).
      EXPECT_GE(r.rdma_credit_returns.get(), (kPackets - 1) / 2);
      // The source has read the grant and some returns (the last ones may
      // still be on their way).
      EXPECT_GE(s.rdma_credit_returns.get(), 1u);
      EXPECT_LE(s.rdma_credit_returns.get(), r.rdma_credit_returns.get() + 1);
      if (rnr_before >= 0) {
        EXPECT_EQ(rnr, 0) << "SENDs met no receive";
      }
    } else {
      EXPECT_EQ(s.rdma_credit_waits.get(), 0u);
      EXPECT_EQ(r.rdma_credit_returns.get(), 0u);
      if (rnr_before >= 0) {
        EXPECT_GT(rnr, 0) << "the RNR counter saw nothing";
      }
    }
    if (rnr_before < 0) {
      std::cout << "note: no RNR counter on this RDMA device; credits "
                   "checked by the transports' own counters only\n";
    }
  }
}

// kCapZeroCopy <=> payload sends asked for zero copy; then every one of
// them completes by Flush. 40 packets through 4 header slots: headers are
// reused ten times, and still arrive intact.
TEST_P(CapabilityConformance, ZeroCopyMatchesZeroCopySends) {
  options_.header_slots = 4;
  ASSERT_NO_FATAL_FAILURE(Open());
  constexpr uint32_t kPackets = 40;
  PacketReader reader(pair_.rx.get(), base(), kPackets, dest());
  for (uint32_t i = 0; i < kPackets; ++i) {
    const uint64_t off = (i * kChunk) % kRegionBytes;
    ASSERT_OK(SendTagged(tx(), i, 7, base(), {{off, kChunk}}));
  }
  ASSERT_OK(tx().Flush());
  ASSERT_OK(reader.Finish());
  EXPECT_EQ(reader.tags(), Iota(kPackets)) << "a header was overwritten";
  EXPECT_EQ(reader.corrupt(), 0u);

  const channels::TransportStats& s = tx().stats();
  EXPECT_EQ(Has(channels::kCapZeroCopy), s.zc_sends.get() > 0)
      << "zc_sends=" << s.zc_sends.get();
  if (Has(channels::kCapZeroCopy)) {
    EXPECT_EQ(s.zc_sends.get(), kPackets);
    EXPECT_EQ(s.zc_completions.get(), s.zc_sends.get());
    EXPECT_LE(s.zc_copied.get(), s.zc_completions.get());
    if (!is_rdma()) {
      EXPECT_GE(s.zc_notifications.get(), 1u);
    }
  } else {
    EXPECT_EQ(s.zc_completions.get(), 0u);
    EXPECT_EQ(s.zc_notifications.get(), 0u);
  }
  EXPECT_EQ(s.short_sends.get(), 0u);
  if (!is_rdma()) {
    EXPECT_EQ(s.send_calls.get(), kPackets);
  } else {
    // RDMA's completions come from its CQ, one per post (the post's last
    // WR is signalled): there are no MSG_ZEROCOPY notifications to read.
    // Instead: every packet is one post (a WRITE for its run, then the
    // header's SEND), and the only other posts are REGISTER_REQUESTs for
    // the 4 chunks (256 KiB each) the packets wrote; random data, so no
    // chunk went as COMPRESS.
    EXPECT_EQ(s.zc_notifications.get(), 0u);
    EXPECT_EQ(s.chunks_compressed.get(), 0u);
    EXPECT_EQ(rx().stats().chunks_registered.get(), 4u);
    EXPECT_GE(s.register_round_trips.get(), 1u);
    EXPECT_LE(s.register_round_trips.get(), 4u);
    EXPECT_EQ(s.rdma_posts.get(), kPackets + s.register_round_trips.get());
    EXPECT_EQ(s.send_calls.get(), s.rdma_posts.get());
    EXPECT_EQ(s.rdma_wrs.get(), 2 * kPackets + s.register_round_trips.get());
  }
}

// kCapHeaderSlots => each packet's header has its own buffer until the
// array wraps, and after Flush() the first slot comes back. Without it,
// no slot is ever counted in flight.
TEST_P(CapabilityConformance, HeaderSlotsRotateAndReturnAfterFlush) {
  constexpr uint32_t kSlots = 4;
  options_.header_slots = kSlots;
  options_.completion = CompletionPolicy::kSlot;  // no flush at wrap
  ASSERT_NO_FATAL_FAILURE(Open());
  PacketReader reader(pair_.rx.get(), base(), kSlots + 2, dest());
  std::vector<const uint8_t*> used;
  for (uint32_t i = 0; i < kSlots; ++i) {
    const uint8_t* h = nullptr;
    ASSERT_OK(SendTagged(tx(), i, 7, base(), {{i * kChunk, kChunk}}, &h));
    used.push_back(h);
  }
  ASSERT_OK(tx().Flush());
  const uint8_t* again = nullptr;
  ASSERT_OK(SendTagged(tx(), kSlots, 7, base(), {{0, kChunk}}, &again));
  const uint8_t* next = nullptr;
  ASSERT_OK(SendTagged(tx(), kSlots + 1, 7, base(), {{kChunk, kChunk}}, &next));
  ASSERT_OK(tx().Flush());
  ASSERT_OK(reader.Finish());
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
// syscall, made before SendPacket returns; rdma, which lacks it too, is
// checked for what it does instead (below).
TEST_P(CapabilityConformance, BatchedSubmitSharesSyscalls) {
  constexpr uint32_t kPackets = 16;
  options_.header_slots = 64;  // no wrap: nothing forces an early submit
  options_.completion = CompletionPolicy::kSlot;
  ASSERT_NO_FATAL_FAILURE(Open());
  PacketReader reader(pair_.rx.get(), base(), kPackets, dest());
  const channels::TransportStats& s = tx().stats();
  for (uint32_t i = 0; i < kPackets; ++i) {
    ASSERT_OK(SendTagged(tx(), i, 7, base(), {{i * kChunk, kChunk}}));
  }
  const uint64_t sent_before_submit = s.send_calls.get();
  const uint64_t submits_before_submit = s.submit_calls.get();
  ASSERT_OK(tx().Submit());
  const uint64_t submits = s.submit_calls.get();
  const uint64_t sends = s.send_calls.get();
  ASSERT_OK(tx().Flush());
  ASSERT_OK(reader.Finish());
  EXPECT_EQ(reader.tags(), Iota(kPackets));
  EXPECT_EQ(reader.corrupt(), 0u);

  if (is_rdma()) {
    // Not "one syscall per packet before SendPacket returns": rdma queues
    // packets until Submit() (or a wait for a header slot) so that their
    // chunks are registered together (channels/rdma/rdma.h), then posts each
    // packet as its own ibv_post_send chain. Deferred, but never several
    // packets in one submission: hence no kCapBatchedSubmit. A verbs post
    // is no syscall of ours, so submit_calls stays 0; the posts are what
    // count: nothing before Submit(), then one REGISTER_REQUEST for all 4
    // chunks the 16 packets wrote (both ends have REG_BATCH) and one post
    // per packet (its WRITE, then its SEND).
    EXPECT_FALSE(Has(channels::kCapBatchedSubmit));
    EXPECT_EQ(sent_before_submit, 0u) << "posted before Submit()";
    EXPECT_EQ(submits_before_submit, 0u);
    EXPECT_EQ(submits, 0u);
    EXPECT_EQ(s.register_round_trips.get(), 1u);
    EXPECT_EQ(s.register_batch_max.get(), 4u);
    EXPECT_EQ(sends, kPackets + 1) << "one post per packet + the request";
    EXPECT_EQ(s.rdma_posts.get(), sends);
    EXPECT_EQ(s.rdma_wrs.get(), 2 * kPackets + 1);
    return;
  }
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
// RegisterRegion is accepted and changes nothing. (rdma cannot move data
// without it: Open() registered both ends already. It runs twice: chunks
// registered on demand, and pin-all, where the destination registers the
// whole region up front and sends its key on its first read.)
TEST_P(CapabilityConformance, RegisteredBuffersDeliverIntact) {
  options_.registered_buffers = true;
  options_.header_slots = 8;
  const std::vector<bool> pin_all_modes =
      is_rdma() ? std::vector<bool>{false, true} : std::vector<bool>{false};
  for (const bool pin_all : pin_all_modes) {
    SCOPED_TRACE(pin_all ? "pin-all" : "registered on demand");
    RdmaPairOptions rdma;
    rdma.pin_all = pin_all;
    ASSERT_NO_FATAL_FAILURE(Open(rdma));
    if (!is_rdma()) {
      absl::Status reg =
          tx().RegisterRegion(7, src_.memory->data(), kRegionBytes);
      ASSERT_OK(reg);
    }
    constexpr uint32_t kPackets = 24;
    PacketReader reader(pair_.rx.get(), base(), kPackets, dest());
    for (uint32_t i = 0; i < kPackets; ++i) {
      // Two runs, out of order and apart: [i*8K, +8K) then [512K + i*4K,
      // +12K).
      const std::vector<PayloadRun> runs = {
          {(kRegionBytes / 2) + i * 4096, 12288}, {i * 8192, 8192}};
      ASSERT_OK(SendTagged(tx(), i, 7, base(), runs));
    }
    ASSERT_OK(tx().Flush());
    ASSERT_OK(reader.Finish());
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
      if (is_rdma()) {
        // One post per packet: a WRITE per run from the registered source
        // into the registered destination, then the header's SEND. On
        // demand, the runs lie in chunks 0 and 2 (of 256 KiB): the
        // destination registers each once, asked for in one request.
        // Pin-all: no request; the destination registered all 4 chunks.
        const uint64_t requests = pin_all ? 0 : 1;
        EXPECT_EQ(s.zc_sends.get(), kPackets);
        EXPECT_EQ(s.register_round_trips.get(), requests);
        EXPECT_EQ(rx().stats().chunks_registered.get(), pin_all ? 4u : 2u);
        EXPECT_EQ(s.rdma_posts.get(), kPackets + requests);
        EXPECT_EQ(s.send_calls.get(), s.rdma_posts.get());
        EXPECT_EQ(s.rdma_wrs.get(), 3 * kPackets + requests);
      }
    } else if (Has(channels::kCapZeroCopy)) {
      EXPECT_EQ(s.zc_sends.get(), kPackets) << "one send per packet, as ever";
      EXPECT_EQ(s.send_calls.get(), kPackets);
    } else {
      EXPECT_EQ(s.zc_sends.get(), 0u);
      EXPECT_EQ(s.send_calls.get(), kPackets);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, CapabilityConformance,
                         ::testing::ValuesIn(kAllTransports),
                         [](const auto& info) { return TestName(info.param); });

// What a family promises before any connection exists, against what the
// engine and the channel factory do with it. Runs for every kind, even
// one this machine cannot run: these decisions come before any probe.
class FamilyConformance : public ::testing::TestWithParam<TransportKind> {
 protected:
  bool Has(uint32_t cap) const {
    return (channels::StaticCapabilities(GetParam()) & cap) != 0;
  }
  SessionOptions Options() const {
    SessionOptions o = ::ramferry::testing::InsecureOptions();
    o.transport = GetParam();
    return o;
  }
  const std::string kKey = std::string(32, 'k');
};

TEST_P(FamilyConformance, NamedOnceAndZeroCopyByItsBit) {
  const channels::TransportFamily* f =
      channels::FindTransportFamily(GetParam());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(ParseTransportKind(f->name).value(), GetParam());
  EXPECT_EQ(TransportKindName(GetParam()), f->name);
  EXPECT_EQ(IsZeroCopy(GetParam()), Has(channels::kCapZeroCopy));
}

TEST_P(FamilyConformance, AKeyIsTakenExactlyWhereTheHelloCanProveIt) {
  SessionOptions o = Options();
  o.auth_key = kKey;
  const absl::Status s = ValidateOptions(o);
  if (Has(channels::kCapAuthenticatedHello)) {
    EXPECT_OK(s);
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
    EXPECT_THAT(std::string(s.message()),
                ::testing::HasSubstr(TransportKindName(GetParam())));
  }
}

// The control connection proves the key for every family; a destination
// with a key admits the session only where the data channels can prove it
// too.
TEST_P(FamilyConformance, AKeyedDestinationAdmitsOnlySessionsThatCanProveIt) {
  const std::string unavailable = testing::WhyUnavailable(GetParam());
  testing::TestRegion dst = testing::MakeRegion(1, 1 << 20);
  SessionOptions o = ::ramferry::testing::InsecureOptions();
  o.auth_key = kKey;
  o.protect = Protection::kNone;  // FakeSource writes an unsealed stream
  o.transport = GetParam();
  testing::UseTransportHost(o);  // rdma listens on the device's address
  testing::ServingReceiver rx(o, {dst.region});
  testing::FakeSource fake(rx.port(), 1);
  fake.set_host(o.host);
  fake.set_key(kKey);
  proto::Hello hello = fake.MakeHello(proto::Role::kControl, 0);
  hello.transport = static_cast<uint16_t>(GetParam());
  if (Has(channels::kCapChunkedRegistration)) {
    hello.rdma_chunk_bytes = proto::kMinRdmaChunkBytes;
  }
  absl::StatusOr<int> fd = fake.Connect(hello);
  if (Has(channels::kCapAuthenticatedHello) && !unavailable.empty()) {
    // Admitted past the key; the family's own listener cannot start here.
    ASSERT_THAT(fd, StatusIs(absl::StatusCode::kFailedPrecondition,
                             HasSubstr("destination cannot serve")))
        << unavailable;
  } else if (Has(channels::kCapAuthenticatedHello)) {
    ASSERT_OK(fd);
    close(*fd);
  } else {
    ASSERT_THAT(
        fd,
        StatusIs(absl::StatusCode::kUnimplemented,
                 HasSubstr(absl::StrCat("which ", TransportKindName(GetParam()),
                                        " channels cannot do"))));
  }
  rx.receiver().Abort(absl::CancelledError("test over"));
  EXPECT_THAT(rx.result(),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("test over")));
}

// Remote placement included: the destination shuts a gone channel's
// transport down (its queue pair to error) before the source re-sends.
TEST_P(FamilyConformance, ChannelLossIsSurvivableOnEveryFamily) {
  SessionOptions o = Options();
  o.survive_channel_loss = true;
  const absl::Status s = ValidateOptions(o);
  EXPECT_OK(s);
}

TEST_P(FamilyConformance, EachFamilyOpensTheWayItConnects) {
  channels::TransportOptions options;
  options.max_header_bytes = 4096;
  if (Has(channels::kCapOwnsConnection)) {
    // Never on a socket someone else connected: it owns the fd, and closes
    // it when it refuses.
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    absl::StatusOr<std::unique_ptr<channels::Transport>> t =
        channels::OpenSocketChannel(GetParam(), fds[0], options);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(fcntl(fds[0], F_GETFD), -1) << "the refused fd stays open";
    close(fds[1]);
    return;
  }
  // Its channels arrive through the destination's TCP acceptor.
  channels::ConnectSpec spec;
  spec.host = "127.0.0.1";
  spec.options = options;
  absl::StatusOr<std::unique_ptr<channels::ChannelListener>> l =
      channels::ListenForChannels(GetParam(), spec, nullptr, nullptr);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(l.status().message()),
              ::testing::HasSubstr("TCP acceptor"));
}

INSTANTIATE_TEST_SUITE_P(Transports, FamilyConformance,
                         ::testing::ValuesIn(kAllTransports),
                         [](const auto& info) { return TestName(info.param); });

}  // namespace
}  // namespace ramferry::conformance
