// CommandRing: the SPSC ring between the scheduler and a channel thread.
// Single-thread semantics, blocking and wake-ups, a 1M-command contended
// run, barriers, the 2^32 counter wrap, and Abort.
#include "engine/command_ring.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ramferry::engine {
namespace {

// How long a negative check ("has not returned yet") waits. Only ever
// used to give a thread the chance to misbehave; never for ordering.
constexpr absl::Duration kStillBlocked = absl::Milliseconds(50);

// Joins `thread` when a test returns early (a failed ASSERT), aborting the
// ring first so the thread cannot stay blocked in it.
class AbortAndJoin {
 public:
  AbortAndJoin(CommandRing& ring, std::thread& thread)
      : ring_(ring), thread_(thread) {}
  ~AbortAndJoin() {
    if (thread_.joinable()) {
      ring_.Abort();
      thread_.join();
    }
  }

 private:
  CommandRing& ring_;
  std::thread& thread_;
};

void PushWrite(CommandRing& ring, uint32_t region, uint32_t pages,
               uint64_t round, uint64_t first_offset = 0) {
  Command* c = ring.BeginPush();
  ASSERT_NE(c, nullptr);
  c->type = CommandType::kWrite;
  c->region = region;
  c->page_count = pages;
  c->barrier_seq = 0;
  c->round = round;
  for (uint32_t i = 0; i < pages; ++i) c->offsets[i] = first_offset + i;
  ring.CommitPush();
}

TEST(CommandRingTest, EmptyRing) {
  CommandRing ring(8, 4);
  EXPECT_EQ(ring.entries(), 8u);
  EXPECT_EQ(ring.max_pages(), 4u);
  EXPECT_EQ(ring.Peek(100), 0u);
  EXPECT_EQ(ring.backlog_pages(), 0u);
  EXPECT_EQ(ring.max_occupancy(), 0u);
  EXPECT_FALSE(ring.aborted());
}

TEST(CommandRingTest, PushPeekAtRelease) {
  CommandRing ring(8, 4);
  PushWrite(ring, 1, 3, 10, 100);
  PushWrite(ring, 2, 4, 11, 200);
  PushWrite(ring, 3, 1, 12, 300);
  EXPECT_EQ(ring.Peek(100), 3u);
  EXPECT_EQ(ring.Peek(2), 2u);
  EXPECT_EQ(ring.Peek(0), 0u);
  for (uint32_t i = 0; i < 3; ++i) {
    const Command& c = ring.At(i);
    EXPECT_EQ(c.type, CommandType::kWrite);
    EXPECT_EQ(c.region, i + 1);
    EXPECT_EQ(c.round, 10 + i);
    EXPECT_EQ(c.barrier_seq, 0u);
  }
  EXPECT_EQ(ring.At(1).page_count, 4u);
  EXPECT_EQ(ring.At(1).offsets[3], 203u);
  EXPECT_EQ(ring.backlog_pages(), 8u);

  // Peek does not consume.
  EXPECT_EQ(ring.Peek(100), 3u);
  ring.Release(2);
  EXPECT_EQ(ring.Peek(100), 1u);
  EXPECT_EQ(ring.At(0).region, 3u);
  EXPECT_EQ(ring.At(0).offsets[0], 300u);
  EXPECT_EQ(ring.backlog_pages(), 1u);
  ring.Release(1);
  EXPECT_EQ(ring.Peek(100), 0u);
  EXPECT_EQ(ring.backlog_pages(), 0u);
  EXPECT_EQ(ring.max_occupancy(), 3u);
}

TEST(CommandRingTest, EachSlotOwnsItsOffsets) {
  constexpr uint32_t kEntries = 4, kMaxPages = 5;
  CommandRing ring(kEntries, kMaxPages);
  for (uint32_t e = 0; e < kEntries; ++e) {
    PushWrite(ring, e, kMaxPages, 0, 1000 * e);
  }
  ASSERT_EQ(ring.Peek(100), kEntries);
  for (uint32_t e = 0; e < kEntries; ++e) {
    for (uint32_t i = 0; i < kMaxPages; ++i) {
      EXPECT_EQ(ring.At(e).offsets[i], 1000 * e + i) << e << " " << i;
    }
  }
}

TEST(CommandRingTest, FillsExactlyToCapacityAndReusesSlots) {
  CommandRing ring(4, 2);
  for (uint64_t round = 0; round < 20; ++round) {
    for (int i = 0; i < 4; ++i) PushWrite(ring, 0, 1, round * 4 + i);
    EXPECT_EQ(ring.Peek(100), 4u);
    for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(ring.At(i).round, round * 4 + i);
    ring.Release(4);
  }
  EXPECT_EQ(ring.max_occupancy(), 4u);
}

TEST(CommandRingTest, MaxOccupancyIsHighWaterMark) {
  CommandRing ring(16, 1);
  for (int i = 0; i < 5; ++i) PushWrite(ring, 0, 1, 0);
  ring.Release(5);
  for (int i = 0; i < 3; ++i) PushWrite(ring, 0, 1, 0);
  EXPECT_EQ(ring.max_occupancy(), 5u);
  for (int i = 0; i < 4; ++i) PushWrite(ring, 0, 1, 0);
  EXPECT_EQ(ring.max_occupancy(), 7u);
}

TEST(CommandRingTest, BacklogCountsWritePagesOnly) {
  CommandRing ring(8, 8);
  PushWrite(ring, 0, 3, 0);
  uint32_t seq = ring.PushBarrier(CommandType::kSync, 0);
  ASSERT_NE(seq, 0u);
  PushWrite(ring, 0, 5, 0);
  EXPECT_EQ(ring.backlog_pages(), 8u);
  ring.Release(1);
  EXPECT_EQ(ring.backlog_pages(), 5u);
  ring.Release(1);  // the barrier: no pages
  EXPECT_EQ(ring.backlog_pages(), 5u);
  ring.Release(1);
  EXPECT_EQ(ring.backlog_pages(), 0u);
}

TEST(CommandRingTest, FullRingBlocksProducerUntilRelease) {
  CommandRing ring(4, 1);
  for (int i = 0; i < 4; ++i) PushWrite(ring, 0, 1, i);
  ASSERT_EQ(ring.Peek(100), 4u);

  absl::Notification returned;
  std::thread producer([&] {
    Command* c = ring.BeginPush();
    ASSERT_NE(c, nullptr);
    c->type = CommandType::kWrite;
    c->page_count = 1;
    c->round = 99;
    ring.CommitPush();
    returned.Notify();
  });
  // No release: the producer must not get a slot.
  EXPECT_FALSE(returned.WaitForNotificationWithTimeout(kStillBlocked));
  EXPECT_EQ(ring.Peek(100), 4u);
  EXPECT_EQ(ring.At(0).round, 0u);  // the blocked push overwrote nothing
  ring.Release(1);
  returned.WaitForNotification();
  producer.join();
  ASSERT_EQ(ring.Peek(100), 4u);
  EXPECT_EQ(ring.At(0).round, 1u);
  EXPECT_EQ(ring.At(3).round, 99u);
  EXPECT_EQ(ring.max_occupancy(), 4u);
}

TEST(CommandRingTest, ConsumerSleepsUntilPush) {
  CommandRing ring(4, 1);
  absl::Notification woke;
  std::atomic<bool> got_work{false};
  std::thread consumer([&] {
    got_work = ring.WaitForWork();
    woke.Notify();
  });
  EXPECT_FALSE(woke.WaitForNotificationWithTimeout(kStillBlocked));
  PushWrite(ring, 0, 1, 7);
  woke.WaitForNotification();
  consumer.join();
  EXPECT_TRUE(got_work);
  EXPECT_EQ(ring.Peek(10), 1u);
  // With work queued it returns at once.
  EXPECT_TRUE(ring.WaitForWork());
}

// One producer, one consumer, 1M commands through a small ring. The round
// field carries a sequence number; the consumer checks order and loss.
void RunContended(uint32_t first_seq) {
  constexpr uint32_t kEntries = 64, kMaxPages = 4;
  constexpr uint64_t kCommands = 1'000'000;
  CommandRing ring(kEntries, kMaxPages, first_seq);
  std::atomic<bool> consumer_ok{true};
  uint64_t consumed = 0, pages_seen = 0;

  std::thread consumer([&] {
    uint64_t expect = 0;
    while (expect < kCommands) {
      uint32_t n = ring.Peek(128);
      if (n == 0) {
        if (!ring.WaitForWork()) break;
        continue;
      }
      if (n > kEntries) {
        consumer_ok = false;
        break;
      }
      for (uint32_t i = 0; i < n; ++i) {
        const Command& c = ring.At(i);
        const uint32_t want_pages =
            static_cast<uint32_t>(expect % kMaxPages) + 1;
        if (c.type != CommandType::kWrite || c.round != expect ||
            c.page_count != want_pages || c.offsets[0] != expect * 3 ||
            c.offsets[want_pages - 1] != expect * 3 + want_pages - 1) {
          consumer_ok = false;
          ring.Abort();
          return;
        }
        pages_seen += c.page_count;
        ++expect;
      }
      ring.Release(n);
    }
    consumed = expect;
  });

  uint64_t pages_pushed = 0;
  for (uint64_t i = 0; i < kCommands; ++i) {
    Command* c = ring.BeginPush();
    if (c == nullptr) break;  // consumer found a bad command
    c->type = CommandType::kWrite;
    c->page_count = static_cast<uint32_t>(i % kMaxPages) + 1;
    c->round = i;
    for (uint32_t p = 0; p < c->page_count; ++p) c->offsets[p] = i * 3 + p;
    pages_pushed += c->page_count;
    ring.CommitPush();
  }
  consumer.join();
  ASSERT_TRUE(consumer_ok) << "consumer saw a command out of order";
  EXPECT_EQ(consumed, kCommands);
  EXPECT_EQ(pages_seen, pages_pushed);
  EXPECT_EQ(ring.backlog_pages(), 0u);
  EXPECT_EQ(ring.Peek(1000), 0u);
  EXPECT_LE(ring.max_occupancy(), kEntries);
  EXPECT_GE(ring.max_occupancy(), 1u);
}

TEST(CommandRingTest, ContendedMillionCommandsInOrder) { RunContended(0); }

TEST(CommandRingTest, ContendedAcrossCounterWrap) { RunContended(0xFFFFFFF0u); }

// ---- barriers ----

TEST(CommandRingTest, BarriersSingleThread) {
  CommandRing ring(8, 2);
  uint32_t s1 = ring.PushBarrier(CommandType::kSync, 4);
  uint32_t s2 = ring.PushBarrier(CommandType::kSync, 5);
  uint32_t s3 = ring.PushBarrier(CommandType::kFinish, 5);
  EXPECT_NE(s1, 0u);
  EXPECT_EQ(s2, s1 + 1);
  EXPECT_EQ(s3, s2 + 1);
  ASSERT_EQ(ring.Peek(10), 3u);
  EXPECT_EQ(ring.At(0).type, CommandType::kSync);
  EXPECT_EQ(ring.At(0).barrier_seq, s1);
  EXPECT_EQ(ring.At(0).round, 4u);
  EXPECT_EQ(ring.At(0).page_count, 0u);
  EXPECT_EQ(ring.At(2).type, CommandType::kFinish);
  EXPECT_EQ(ring.At(2).barrier_seq, s3);
  EXPECT_EQ(ring.backlog_pages(), 0u);
  ring.Release(3);
  // Completing a later barrier covers the earlier ones.
  ring.CompleteBarrier(s2);
  EXPECT_TRUE(ring.WaitBarrier(s1));
  EXPECT_TRUE(ring.WaitBarrier(s2));
  ring.CompleteBarrier(s3);
  EXPECT_TRUE(ring.WaitBarrier(s3));
}

TEST(CommandRingTest, WaitBarrierReturnsOnlyAfterCompleteBarrier) {
  CommandRing ring(8, 2);
  std::atomic<bool> completed{false};
  std::thread consumer([&] {
    while (ring.WaitForWork()) {
      uint32_t n = ring.Peek(8);
      for (uint32_t i = 0; i < n; ++i) {
        const Command& c = ring.At(i);
        if (c.type != CommandType::kWrite) {
          completed = true;
          ring.CompleteBarrier(c.barrier_seq);
          if (c.type == CommandType::kFinish) {
            ring.Release(n);
            return;
          }
        }
      }
      ring.Release(n);
    }
  });
  AbortAndJoin guard(ring, consumer);
  PushWrite(ring, 0, 2, 0);
  uint32_t seq = ring.PushBarrier(CommandType::kFinish, 0);
  ASSERT_NE(seq, 0u);
  EXPECT_TRUE(ring.WaitBarrier(seq));
  EXPECT_TRUE(completed);
  consumer.join();
}

// Producer pushes writes and barriers and waits on each barrier; the
// consumer completes them. Sequence numbers cross 2^32 (skipping 0) and
// head/tail cross it too.
TEST(CommandRingTest, BarriersAcrossSeqWrapThreaded) {
  constexpr uint32_t kEntries = 8;
  constexpr int kBarriers = 100;
  CommandRing ring(kEntries, 2, 0xFFFFFFF0u);
  std::atomic<uint32_t> last_completed{0};
  std::atomic<bool> consumer_ok{true};
  std::thread consumer([&] {
    uint64_t next_round = 0;
    while (ring.WaitForWork()) {
      uint32_t n = ring.Peek(128);
      for (uint32_t i = 0; i < n; ++i) {
        const Command& c = ring.At(i);
        if (c.round != next_round) consumer_ok = false;
        if (c.type == CommandType::kWrite) continue;
        if (c.barrier_seq == 0) consumer_ok = false;
        ++next_round;
        last_completed = c.barrier_seq;
        ring.CompleteBarrier(c.barrier_seq);
        if (c.type == CommandType::kFinish) {
          ring.Release(n);
          return;
        }
      }
      ring.Release(n);
    }
  });

  AbortAndJoin guard(ring, consumer);
  std::vector<uint32_t> seqs;
  for (int b = 0; b < kBarriers; ++b) {
    for (int w = 0; w < 3; ++w) PushWrite(ring, 0, 1, b);
    const bool last = b == kBarriers - 1;
    uint32_t seq =
        ring.PushBarrier(last ? CommandType::kFinish : CommandType::kSync, b);
    ASSERT_NE(seq, 0u);
    seqs.push_back(seq);
    ASSERT_TRUE(ring.WaitBarrier(seq));
    // Returned only once the consumer completed this very barrier.
    EXPECT_EQ(last_completed.load(), seq) << b;
  }
  consumer.join();
  EXPECT_TRUE(consumer_ok);
  // 0xFFFFFFF0 .. 0xFFFFFFFF, then 1, 2, ... (0 skipped).
  EXPECT_EQ(seqs[0], 0xFFFFFFF0u);
  EXPECT_EQ(seqs[15], 0xFFFFFFFFu);
  EXPECT_EQ(seqs[16], 1u);
  for (size_t i = 1; i < seqs.size(); ++i) {
    uint32_t want = seqs[i - 1] + 1 == 0 ? 1 : seqs[i - 1] + 1;
    EXPECT_EQ(seqs[i], want) << i;
  }
  // Every earlier barrier counts as reached, across the wrap.
  for (uint32_t s : seqs) EXPECT_TRUE(ring.WaitBarrier(s)) << s;
}

TEST(CommandRingTest, CountersAndSeqsCrossWrapSingleThread) {
  constexpr uint32_t kEntries = 8;
  CommandRing ring(kEntries, 3, 0xFFFFFFF0u);
  uint32_t prev_seq = 0;
  uint64_t next_round = 0;
  int barriers = 0;
  // > 32 barriers and > 2 * entries commands, consumed in varying batch
  // sizes so head and tail wrap at different moments.
  for (int step = 0; step < 40; ++step) {
    const int batch = 1 + step % (kEntries - 1);  // 1..7 entries
    std::vector<uint32_t> pushed;
    for (int k = 0; k < batch; ++k) {
      if (k % 2 == 0) {
        PushWrite(ring, 0, 1 + k % 3, next_round++);
      } else {
        uint32_t seq = ring.PushBarrier(CommandType::kSync, next_round++);
        ASSERT_NE(seq, 0u);
        if (prev_seq != 0) {
          ASSERT_EQ(seq, prev_seq + 1 == 0 ? 1u : prev_seq + 1);
        } else {
          ASSERT_EQ(seq, 0xFFFFFFF0u);
        }
        prev_seq = seq;
        pushed.push_back(seq);
        ++barriers;
      }
    }
    ASSERT_EQ(ring.Peek(128), static_cast<uint32_t>(batch)) << step;
    const uint64_t first_round = next_round - batch;
    for (int k = 0; k < batch; ++k) {
      EXPECT_EQ(ring.At(k).round, first_round + k);
      EXPECT_EQ(ring.At(k).type,
                k % 2 == 0 ? CommandType::kWrite : CommandType::kSync);
    }
    // Release in two parts.
    ring.Release(batch / 2);
    ASSERT_EQ(ring.Peek(128), static_cast<uint32_t>(batch - batch / 2));
    ring.Release(batch - batch / 2);
    ASSERT_EQ(ring.Peek(128), 0u);
    for (uint32_t s : pushed) {
      ring.CompleteBarrier(s);
      EXPECT_TRUE(ring.WaitBarrier(s));
    }
  }
  EXPECT_GT(barriers, 32);
  EXPECT_GT(next_round, 2u * kEntries);
  EXPECT_LT(prev_seq, 0xFFFFFFF0u);  // wrapped
  EXPECT_EQ(ring.backlog_pages(), 0u);
  EXPECT_EQ(ring.max_occupancy(), kEntries - 1);

  // A full ring straddling the wrap still reports entries() ready.
  for (uint32_t i = 0; i < kEntries; ++i) PushWrite(ring, 0, 1, i);
  EXPECT_EQ(ring.Peek(128), kEntries);
  EXPECT_EQ(ring.max_occupancy(), kEntries);
  for (uint32_t i = 0; i < kEntries; ++i) EXPECT_EQ(ring.At(i).round, i);
}

TEST(CommandRingTest, FirstSeqZeroStartsAtOne) {
  CommandRing ring(4, 1, 0);
  EXPECT_EQ(ring.PushBarrier(CommandType::kSync, 0), 1u);
  CommandRing ring2(4, 1, 0xFFFFFFFFu);
  EXPECT_EQ(ring2.PushBarrier(CommandType::kSync, 0), 0xFFFFFFFFu);
  EXPECT_EQ(ring2.PushBarrier(CommandType::kSync, 0), 1u);
  ring2.Release(2);
  ring2.CompleteBarrier(0xFFFFFFFFu);
  EXPECT_TRUE(ring2.WaitBarrier(0xFFFFFFFFu));
  ring2.CompleteBarrier(1);
  EXPECT_TRUE(ring2.WaitBarrier(1));
}

// ---- Abort ----

TEST(CommandRingTest, AbortWakesProducerOnFullRing) {
  CommandRing ring(2, 1);
  PushWrite(ring, 0, 1, 0);
  PushWrite(ring, 0, 1, 1);
  absl::Notification returned;
  Command* got = reinterpret_cast<Command*>(1);
  std::thread producer([&] {
    got = ring.BeginPush();
    returned.Notify();
  });
  EXPECT_FALSE(returned.WaitForNotificationWithTimeout(kStillBlocked));
  ring.Abort();
  producer.join();
  EXPECT_EQ(got, nullptr);
  EXPECT_TRUE(ring.aborted());
  // Sticky: later pushes fail at once, even with room.
  ring.Release(2);
  EXPECT_EQ(ring.BeginPush(), nullptr);
  EXPECT_EQ(ring.PushBarrier(CommandType::kSync, 0), 0u);
}

TEST(CommandRingTest, AbortWakesProducerInWaitBarrier) {
  CommandRing ring(4, 1);
  uint32_t seq = ring.PushBarrier(CommandType::kSync, 0);
  ASSERT_NE(seq, 0u);
  absl::Notification returned;
  std::atomic<bool> result{true};
  std::thread producer([&] {
    result = ring.WaitBarrier(seq);
    returned.Notify();
  });
  EXPECT_FALSE(returned.WaitForNotificationWithTimeout(kStillBlocked));
  ring.Abort();
  producer.join();
  EXPECT_FALSE(result);
  EXPECT_FALSE(ring.WaitBarrier(seq));
}

TEST(CommandRingTest, AbortWakesSleepingConsumer) {
  CommandRing ring(4, 1);
  absl::Notification returned;
  std::atomic<bool> result{true};
  std::thread consumer([&] {
    result = ring.WaitForWork();
    returned.Notify();
  });
  EXPECT_FALSE(returned.WaitForNotificationWithTimeout(kStillBlocked));
  ring.Abort();
  consumer.join();
  EXPECT_FALSE(result);
  // Sticky: later calls fail at once.
  EXPECT_FALSE(ring.WaitForWork());
}

}  // namespace
}  // namespace ramferry::engine
