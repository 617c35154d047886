// HeaderSlots: the rotating header array of a zero-copy channel. A fake
// completion source holds completions back until HeaderSlots asks for them
// (a blocking Reap), and remembers a checksum of each slot's buffer at the
// time a send carrying it was issued. The test writes slot buffers only
// through Acquire(); if Acquire ever handed out a slot the "kernel" still
// reads, the checksum taken at issue no longer matches at completion.
#include "channels/header_slots.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::channels {
namespace {

using ::testing::HasSubstr;

constexpr size_t kSlotBytes = 96;

uint64_t Checksum(absl::Span<const uint8_t> b) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (uint8_t c : b) h = (h ^ c) * 1099511628211ull;
  return h;
}

enum class Order { kInOrder, kReverse, kRandom };

std::string OrderName(Order o) {
  switch (o) {
    case Order::kInOrder:
      return "in-order";
    case Order::kReverse:
      return "reverse";
    case Order::kRandom:
      return "random";
  }
  return "?";
}

std::string PolicyName(CompletionPolicy p) {
  switch (p) {
    case CompletionPolicy::kWrap:
      return "wrap";
    case CompletionPolicy::kSlot:
      return "slot";
    case CompletionPolicy::kEach:
      return "each";
  }
  return "?";
}

// Completions arrive only when HeaderSlots reaps: a blocking Reap releases
// `per_blocking_reap` outstanding tokens (0 = all) in `order`; a
// non-blocking one releases `per_nonblocking_reap` (default 0: none;
// SIZE_MAX: all).
class FakeSource : public CompletionSource {
 public:
  explicit FakeSource(Order order = Order::kInOrder, uint64_t seed = 1)
      : order_(order), rng_(seed) {}

  void set_per_blocking_reap(size_t n) { per_blocking_reap_ = n; }
  void set_per_nonblocking_reap(size_t n) { per_nonblocking_reap_ = n; }
  void set_copied_every(uint32_t n) { copied_every_ = n; }
  void FailBlockingReaps(absl::Status s) { fail_ = std::move(s); }

  // A send carrying `slot` was issued as `token`; remembers the bytes it
  // carries.
  void Issue(uint32_t token, uint32_t slot, absl::Span<const uint8_t> buf) {
    ASSERT_EQ(tokens_.count(token), 0u) << "token " << token << " reused";
    tokens_[token] = {slot, Checksum(buf), issued_++};
    outstanding_.push_back(token);
  }

  size_t OutstandingFor(uint32_t slot) const {
    size_t n = 0;
    for (uint32_t t : outstanding_) n += tokens_.at(t).slot == slot;
    return n;
  }
  size_t outstanding() const { return outstanding_.size(); }

  absl::Status Reap(HeaderSlots& slots, bool block) override {
    if (block) {
      ++blocking_reaps_;
      if (slots.busy(slots.current())) ++blocking_reaps_current_busy_;
      if (!fail_.ok()) return fail_;
      // A real source would wait up to the stall timeout here; with nothing
      // outstanding it could never return a completion.
      if (outstanding_.empty()) {
        return absl::FailedPreconditionError(
            "blocking reap with nothing outstanding");
      }
      return ReleaseN(slots, per_blocking_reap_ == 0 ? outstanding_.size()
                                                     : per_blocking_reap_);
    }
    ++nonblocking_reaps_;
    max_busy_at_nonblocking_ =
        std::max(max_busy_at_nonblocking_, slots.busy_slots());
    min_busy_at_nonblocking_ =
        std::min(min_busy_at_nonblocking_, slots.busy_slots());
    return ReleaseN(slots, per_nonblocking_reap_);
  }

  // Completes one specific token, as the kernel would.
  absl::Status CompleteOne(HeaderSlots& slots, uint32_t token) {
    auto it = std::find(outstanding_.begin(), outstanding_.end(), token);
    EXPECT_NE(it, outstanding_.end());
    outstanding_.erase(it);
    return Deliver(slots, token);
  }

  int blocking_reaps() const { return blocking_reaps_; }
  int blocking_reaps_current_busy() const {
    return blocking_reaps_current_busy_;
  }
  int nonblocking_reaps() const { return nonblocking_reaps_; }
  uint32_t min_busy_at_nonblocking() const { return min_busy_at_nonblocking_; }
  uint64_t completed() const { return completed_; }
  uint64_t copied() const { return copied_; }

 private:
  struct Sent {
    uint32_t slot;
    uint64_t checksum;
    uint64_t seq;
  };

  absl::Status ReleaseN(HeaderSlots& slots, size_t n) {
    for (size_t i = 0; i < n && !outstanding_.empty(); ++i) {
      uint32_t token = 0;
      switch (order_) {
        case Order::kInOrder:
          token = outstanding_.front();
          outstanding_.pop_front();
          break;
        case Order::kReverse:
          token = outstanding_.back();
          outstanding_.pop_back();
          break;
        case Order::kRandom: {
          size_t k = rng_() % outstanding_.size();
          token = outstanding_[k];
          outstanding_.erase(outstanding_.begin() + k);
          break;
        }
      }
      RAMFERRY_RETURN_IF_ERROR(Deliver(slots, token));
    }
    return absl::OkStatus();
  }

  absl::Status Deliver(HeaderSlots& slots, uint32_t token) {
    const Sent& sent = tokens_.at(token);
    // The bytes the send carried were not rewritten while it was in flight.
    EXPECT_EQ(Checksum(slots.buffer(sent.slot)), sent.checksum)
        << "slot " << sent.slot << " rewritten while token " << token
        << " was outstanding";
    const bool copied = copied_every_ != 0 && sent.seq % copied_every_ == 0;
    ++completed_;
    if (copied) ++copied_;
    tokens_.erase(token);
    return slots.Complete(token, copied);
  }

  Order order_;
  std::mt19937_64 rng_;
  size_t per_blocking_reap_ = 1;
  size_t per_nonblocking_reap_ = 0;
  uint32_t copied_every_ = 0;
  absl::Status fail_;
  std::map<uint32_t, Sent> tokens_;
  std::deque<uint32_t> outstanding_;
  uint64_t issued_ = 0;
  int blocking_reaps_ = 0;
  int blocking_reaps_current_busy_ = 0;
  int nonblocking_reaps_ = 0;
  uint32_t max_busy_at_nonblocking_ = 0;
  uint32_t min_busy_at_nonblocking_ = UINT32_MAX;
  uint64_t completed_ = 0;
  uint64_t copied_ = 0;
};

// Drives HeaderSlots the way a zero-copy transport does.
class Driver {
 public:
  Driver(uint32_t slot_count, CompletionPolicy policy, FakeSource* source,
         uint32_t first_token = 0)
      : slots_(slot_count, kSlotBytes, policy, source, &stats_),
        source_(source),
        next_token_(first_token) {}

  // One packet: acquire the header slot, write it, issue `sends` send
  // calls (a short send leaves the rest for another call), move on.
  absl::Status SendPacket(uint32_t sends) {
    auto buf = slots_.Acquire();
    if (!buf.ok()) return buf.status();
    const uint32_t slot = slots_.current();
    EXPECT_FALSE(slots_.busy(slot)) << "Acquire returned busy slot " << slot;
    EXPECT_EQ(source_->OutstandingFor(slot), 0u)
        << "Acquire returned slot " << slot << " with a send in flight";
    EXPECT_EQ(buf->data(), slots_.buffer(slot).data());
    EXPECT_EQ(buf->size(), kSlotBytes);
    // A distinct header per packet.
    for (size_t i = 0; i < buf->size(); ++i) {
      (*buf)[i] = static_cast<uint8_t>(packets_ * 131 + i * 7 + 1);
    }
    for (uint32_t k = 0; k < sends; ++k) {
      const uint32_t token = next_token_++;
      source_->Issue(token, slot, slots_.buffer(slot));
      slots_.Attach(token);
      ++tokens_;
    }
    ++packets_;
    return slots_.PacketSent();
  }

  HeaderSlots& slots() { return slots_; }
  TransportStats& stats() { return stats_; }
  uint64_t tokens() const { return tokens_; }
  uint64_t packets() const { return packets_; }
  uint32_t next_token() const { return next_token_; }

 private:
  TransportStats stats_;
  HeaderSlots slots_;
  FakeSource* source_;
  uint32_t next_token_;
  uint64_t packets_ = 0;
  uint64_t tokens_ = 0;
};

// ---- (a) Acquire never returns a busy slot ----

struct Param {
  CompletionPolicy policy;
  uint32_t sends_per_packet;  // > 1: short sends
  Order order;
  size_t per_reap;  // tokens one blocking reap releases (0 = all)
  uint32_t first_token;
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << PolicyName(p.policy) << ", " << p.sends_per_packet << " sends/packet, "
      << OrderName(p.order) << " completions, " << p.per_reap
      << " per blocking reap, first token " << p.first_token;
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  std::string name = absl::StrCat(PolicyName(p.policy), "_", p.sends_per_packet,
                                  "sends_", OrderName(p.order), "_reap",
                                  p.per_reap, "_tok", p.first_token);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class NeverBusyTest : public ::testing::TestWithParam<Param> {};

TEST_P(NeverBusyTest, AcquireNeverReturnsSlotWithOutstandingToken) {
  const Param& p = GetParam();
  FakeSource source(p.order, /*seed=*/p.sends_per_packet * 31 + p.per_reap);
  source.set_per_blocking_reap(p.per_reap);
  source.set_per_nonblocking_reap(0);
  source.set_copied_every(3);
  constexpr uint32_t kSlots = 8;
  Driver d(kSlots, p.policy, &source, p.first_token);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300; ++i) {
    // Vary the number of send calls per packet around the parameter.
    uint32_t sends =
        p.sends_per_packet == 1 ? 1 : 1 + rng() % p.sends_per_packet;
    ASSERT_OK(d.SendPacket(sends)) << "packet " << i;
    ASSERT_FALSE(HasFailure()) << "packet " << i;
    ASSERT_EQ(d.slots().outstanding_tokens(), source.outstanding());
    ASSERT_LE(d.slots().busy_slots(), kSlots);
  }
  ASSERT_OK(d.slots().Flush());
  EXPECT_EQ(d.slots().outstanding_tokens(), 0u);
  EXPECT_EQ(d.slots().busy_slots(), 0u);
  EXPECT_EQ(source.outstanding(), 0u);
  for (uint32_t s = 0; s < kSlots; ++s) EXPECT_FALSE(d.slots().busy(s)) << s;
  // Every issued token completed exactly once.
  EXPECT_EQ(source.completed(), d.tokens());
  EXPECT_EQ(d.stats().zc_completions.get(), d.tokens());
  EXPECT_EQ(d.stats().zc_copied.get(), source.copied());
  EXPECT_GT(source.copied(), 0u);
}

std::vector<Param> AllParams() {
  std::vector<Param> out;
  for (CompletionPolicy pol : {CompletionPolicy::kWrap, CompletionPolicy::kSlot,
                               CompletionPolicy::kEach}) {
    for (uint32_t sends : {1u, 4u}) {
      for (Order o : {Order::kInOrder, Order::kReverse, Order::kRandom}) {
        for (size_t per_reap : {size_t{1}, size_t{0}}) {
          out.push_back({pol, sends, o, per_reap, 0});
        }
      }
      // Tokens crossing 2^32 mid-run.
      out.push_back({pol, sends, Order::kRandom, 1, 0xFFFFFFF0u});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, NeverBusyTest,
                         ::testing::ValuesIn(AllParams()), ParamName);

// ---- (b) wrap policy ----

TEST(HeaderSlotsWrapTest, FlushesExactlyWhenTheArrayWraps) {
  FakeSource source;
  source.set_per_nonblocking_reap(0);
  constexpr uint32_t kSlots = 8;
  Driver d(kSlots, CompletionPolicy::kWrap, &source);
  uint64_t since_flush = 0;
  for (int i = 0; i < 100; ++i) {
    const uint32_t sends = 1 + i % 3;
    ASSERT_OK(d.SendPacket(sends)) << i;
    since_flush += sends;
    if ((i + 1) % kSlots == 0) {
      EXPECT_EQ(d.slots().current(), 0u) << i;
      EXPECT_EQ(d.slots().outstanding_tokens(), 0u) << i;
      EXPECT_EQ(d.slots().busy_slots(), 0u) << i;
      since_flush = 0;
    } else {
      // Nothing was waited for between wraps.
      EXPECT_EQ(d.slots().outstanding_tokens(), since_flush) << i;
      EXPECT_EQ(d.slots().busy_slots(), (i + 1) % kSlots) << i;
    }
    EXPECT_EQ(d.stats().flushes.get(), static_cast<uint64_t>((i + 1) / kSlots))
        << i;
  }
  EXPECT_EQ(d.stats().flushes.get(), 100u / kSlots);
  // Only flushes reaped, never Acquire.
  EXPECT_EQ(source.nonblocking_reaps(), 0);
  EXPECT_EQ(d.stats().max_slots_in_flight.get(), kSlots);

  // An explicit Flush waits for the 4 packets since the last wrap.
  ASSERT_GT(d.slots().outstanding_tokens(), 0u);
  ASSERT_OK(d.slots().Flush());
  EXPECT_EQ(d.stats().flushes.get(), 100u / kSlots + 1);
  EXPECT_EQ(d.slots().outstanding_tokens(), 0u);
  // A Flush with nothing outstanding counts but does not reap.
  const int reaps = source.blocking_reaps();
  ASSERT_OK(d.slots().Flush());
  EXPECT_EQ(d.stats().flushes.get(), 100u / kSlots + 2);
  EXPECT_EQ(source.blocking_reaps(), reaps);
}

// ---- (c) each policy ----

TEST(HeaderSlotsEachTest, FlushesAfterEveryPacket) {
  for (uint32_t sends : {1u, 3u}) {
    FakeSource source(Order::kReverse);
    source.set_per_nonblocking_reap(0);
    Driver d(4, CompletionPolicy::kEach, &source);
    for (int i = 0; i < 50; ++i) {
      ASSERT_OK(d.SendPacket(sends));
      EXPECT_EQ(d.slots().outstanding_tokens(), 0u) << i;
      EXPECT_EQ(d.slots().busy_slots(), 0u) << i;
      EXPECT_EQ(d.stats().flushes.get(), static_cast<uint64_t>(i + 1));
    }
    // One reap per token (the fake releases one at a time).
    EXPECT_EQ(source.blocking_reaps(), static_cast<int>(50 * sends));
    EXPECT_EQ(d.stats().max_slots_in_flight.get(), 1u);
    EXPECT_EQ(d.stats().zc_completions.get(), 50u * sends);
  }
}

// ---- (d) slot policy ----

TEST(HeaderSlotsSlotTest, BlocksOnlyForTheSlotAboutToBeReused) {
  FakeSource source(Order::kInOrder);
  source.set_per_nonblocking_reap(0);  // nothing ready without waiting
  constexpr uint32_t kSlots = 8;
  Driver d(kSlots, CompletionPolicy::kSlot, &source);
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK(d.SendPacket(1)) << i;
    // Never more than the array holds, and nothing waited for early.
    EXPECT_EQ(d.slots().outstanding_tokens(), std::min<uint64_t>(i + 1, kSlots))
        << i;
  }
  EXPECT_EQ(d.stats().flushes.get(), 0u);
  // Each blocking reap happened with the current slot busy, and released
  // exactly the one token that freed it.
  EXPECT_EQ(source.blocking_reaps(), 100 - static_cast<int>(kSlots));
  EXPECT_EQ(source.blocking_reaps_current_busy(), source.blocking_reaps());
  EXPECT_EQ(d.stats().max_slots_in_flight.get(), kSlots);
  // Opportunistic non-blocking reaps only while more than half are busy.
  EXPECT_GT(source.nonblocking_reaps(), 0);
  EXPECT_GT(source.min_busy_at_nonblocking(), kSlots / 2);

  // Only a forced flush drains it.
  ASSERT_OK(d.slots().Flush());
  EXPECT_EQ(d.stats().flushes.get(), 1u);
  EXPECT_EQ(d.slots().outstanding_tokens(), 0u);
}

TEST(HeaderSlotsSlotTest, NoBlockingWhenOpportunisticReapsKeepUp) {
  FakeSource source(Order::kRandom);
  source.set_per_nonblocking_reap(SIZE_MAX);  // everything sent is ready
  constexpr uint32_t kSlots = 8;
  Driver d(kSlots, CompletionPolicy::kSlot, &source);
  for (int i = 0; i < 100; ++i) ASSERT_OK(d.SendPacket(2)) << i;
  EXPECT_EQ(source.blocking_reaps(), 0);
  EXPECT_GT(source.nonblocking_reaps(), 0);
  EXPECT_EQ(d.stats().flushes.get(), 0u);
  EXPECT_LE(d.stats().max_slots_in_flight.get(), kSlots / 2 + 1);
}

TEST(HeaderSlotsSlotTest, ReusesFreedSlotWithoutWaitingForOthers) {
  // Complete only the oldest slot's token by hand: Acquire of that slot
  // must not block although every other slot is still busy.
  FakeSource source(Order::kInOrder);
  source.set_per_nonblocking_reap(0);
  Driver d(4, CompletionPolicy::kSlot, &source);
  for (int i = 0; i < 4; ++i) ASSERT_OK(d.SendPacket(1));
  ASSERT_EQ(d.slots().current(), 0u);
  ASSERT_EQ(d.slots().busy_slots(), 4u);
  ASSERT_OK(source.CompleteOne(d.slots(), 0));
  EXPECT_FALSE(d.slots().busy(0));
  EXPECT_EQ(d.slots().busy_slots(), 3u);
  ASSERT_OK(d.SendPacket(1));
  EXPECT_EQ(source.blocking_reaps(), 0);
  EXPECT_EQ(d.slots().outstanding_tokens(), 4u);
}

// ---- errors from the source propagate ----

TEST(HeaderSlotsTest, ReapErrorsPropagate) {
  {
    FakeSource source;
    source.set_per_nonblocking_reap(0);
    Driver d(2, CompletionPolicy::kSlot, &source);
    ASSERT_OK(d.SendPacket(1));
    ASSERT_OK(d.SendPacket(1));
    source.FailBlockingReaps(absl::DeadlineExceededError("stalled"));
    auto buf = d.slots().Acquire();
    EXPECT_EQ(buf.status().code(), absl::StatusCode::kDeadlineExceeded);
  }
  {
    FakeSource source;
    source.set_per_nonblocking_reap(0);
    source.FailBlockingReaps(absl::UnavailableError("socket closed"));
    Driver d(2, CompletionPolicy::kEach, &source);
    absl::Status s = d.SendPacket(1);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(d.slots().Flush().code(), absl::StatusCode::kUnavailable);
  }
}

// ---- (e) unknown and duplicate completions ----

TEST(HeaderSlotsTest, CompleteUnknownOrDuplicateTokenFails) {
  TransportStats stats;
  FakeSource source;
  HeaderSlots slots(4, kSlotBytes, CompletionPolicy::kSlot, &source, &stats);

  // Nothing outstanding at all.
  absl::Status s = slots.Complete(0, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("token 0"));

  // Tokens 100..103 on slots 0, 0, 1, 2.
  ASSERT_OK(slots.Acquire());
  slots.Attach(100);
  slots.Attach(101);
  ASSERT_OK(slots.PacketSent());
  slots.Attach(102);
  ASSERT_OK(slots.PacketSent());
  slots.Attach(103);
  EXPECT_EQ(slots.outstanding_tokens(), 4u);

  for (uint32_t bad : {99u, 104u, 200u, 0u, 0xFFFFFFFFu}) {
    s = slots.Complete(bad, false);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << bad;
    EXPECT_THAT(s.message(), HasSubstr("token " + std::to_string(bad)));
  }
  EXPECT_EQ(slots.outstanding_tokens(), 4u);
  EXPECT_EQ(stats.zc_completions.get(), 0u);

  // Out of order: 102 completes ahead of 100 and 101; twice is an error.
  ASSERT_OK(slots.Complete(102, false));
  EXPECT_FALSE(slots.busy(1));
  s = slots.Complete(102, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("token 102"));
  EXPECT_EQ(slots.outstanding_tokens(), 3u);

  // The front completes; its duplicate (already retired) is refused too.
  ASSERT_OK(slots.Complete(100, true));
  EXPECT_TRUE(slots.busy(0));  // 101 still holds slot 0
  s = slots.Complete(100, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  ASSERT_OK(slots.Complete(101, false));
  EXPECT_FALSE(slots.busy(0));
  // 102 was retired with the front; still refused.
  EXPECT_EQ(slots.Complete(102, false).code(), absl::StatusCode::kInternal);
  ASSERT_OK(slots.Complete(103, false));
  EXPECT_EQ(slots.outstanding_tokens(), 0u);
  EXPECT_EQ(slots.busy_slots(), 0u);
  EXPECT_EQ(slots.Complete(103, false).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(slots.Complete(104, false).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(stats.zc_completions.get(), 4u);
  EXPECT_EQ(stats.zc_copied.get(), 1u);
}

// ---- (f) the 2^32 token wrap ----

TEST(HeaderSlotsTest, TokensAcrossTheWrap) {
  TransportStats stats;
  FakeSource source;
  HeaderSlots slots(4, kSlotBytes, CompletionPolicy::kSlot, &source, &stats);
  ASSERT_OK(slots.Acquire());
  slots.Attach(0xFFFFFFFEu);
  slots.Attach(0xFFFFFFFFu);
  ASSERT_OK(slots.PacketSent());
  ASSERT_OK(slots.Acquire());
  slots.Attach(0);
  slots.Attach(1);
  ASSERT_OK(slots.PacketSent());
  EXPECT_EQ(slots.outstanding_tokens(), 4u);
  EXPECT_EQ(slots.busy_slots(), 2u);

  EXPECT_EQ(slots.Complete(2, false).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(slots.Complete(0xFFFFFFFDu, false).code(),
            absl::StatusCode::kInternal);
  // Reverse order across the wrap.
  ASSERT_OK(slots.Complete(1, false));
  ASSERT_OK(slots.Complete(0, false));
  EXPECT_FALSE(slots.busy(1));
  EXPECT_TRUE(slots.busy(0));
  EXPECT_EQ(slots.Complete(0, false).code(), absl::StatusCode::kInternal);
  ASSERT_OK(slots.Complete(0xFFFFFFFFu, false));
  ASSERT_OK(slots.Complete(0xFFFFFFFEu, false));
  EXPECT_EQ(slots.outstanding_tokens(), 0u);
  EXPECT_EQ(slots.busy_slots(), 0u);

  // And on from there.
  ASSERT_OK(slots.Acquire());
  slots.Attach(2);
  ASSERT_OK(slots.Complete(2, false));
  EXPECT_EQ(slots.outstanding_tokens(), 0u);
}

TEST(HeaderSlotsTest, LongRunAcrossTheWrapEveryPolicy) {
  for (CompletionPolicy pol : {CompletionPolicy::kWrap, CompletionPolicy::kSlot,
                               CompletionPolicy::kEach}) {
    SCOPED_TRACE(PolicyName(pol));
    FakeSource source(Order::kRandom, 99);
    source.set_per_nonblocking_reap(1);
    Driver d(4, pol, &source, 0xFFFFFFF0u);
    for (int i = 0; i < 40; ++i) ASSERT_OK(d.SendPacket(1 + i % 2));
    ASSERT_OK(d.slots().Flush());
    EXPECT_EQ(d.slots().outstanding_tokens(), 0u);
    EXPECT_EQ(d.next_token(), 0xFFFFFFF0u + 60);  // wrapped to 44
    EXPECT_EQ(d.stats().zc_completions.get(), 60u);
  }
}

// ---- (g) counters ----

TEST(HeaderSlotsTest, CountersAndMaxSlotsInFlight) {
  FakeSource source(Order::kInOrder);
  source.set_per_nonblocking_reap(0);
  source.set_per_blocking_reap(0);  // a flush reaps everything at once
  source.set_copied_every(2);
  TransportStats* stats;
  Driver d(6, CompletionPolicy::kSlot, &source);
  stats = &d.stats();
  // Short sends: 3 tokens on each of 4 slots: 4 busy slots, 12 tokens.
  for (int i = 0; i < 4; ++i) ASSERT_OK(d.SendPacket(3));
  EXPECT_EQ(stats->max_slots_in_flight.get(), 4u);
  EXPECT_EQ(d.slots().busy_slots(), 4u);
  EXPECT_EQ(d.slots().outstanding_tokens(), 12u);
  EXPECT_EQ(stats->zc_completions.get(), 0u);
  ASSERT_OK(d.slots().Flush());
  EXPECT_EQ(stats->zc_completions.get(), 12u);
  EXPECT_EQ(stats->zc_copied.get(), 6u);  // tokens 0, 2, 4, ... flagged
  EXPECT_EQ(source.copied(), 6u);
  // A high-water mark: stays after the slots drain.
  EXPECT_EQ(stats->max_slots_in_flight.get(), 4u);
  EXPECT_EQ(d.slots().busy_slots(), 0u);
  for (int i = 0; i < 2; ++i) ASSERT_OK(d.SendPacket(1));
  EXPECT_EQ(stats->max_slots_in_flight.get(), 4u);

  // Exported into the public channel stats.
  ChannelStats out;
  stats->ExportTo(&out);
  EXPECT_EQ(out.zc_completions, 12u);
  EXPECT_EQ(out.zc_copied, 6u);
  EXPECT_EQ(out.max_slots_in_flight, 4u);
  EXPECT_EQ(out.flushes, 1u);
}

}  // namespace
}  // namespace ramferry::channels
