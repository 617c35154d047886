#include "engine/command_ring.h"

#include "base/clock.h"
#include "base/counters.h"

namespace ramferry::engine {
namespace {

// Signed distance: true when `seq` is at or before `done`, across wraps.
bool Reached(uint32_t done, uint32_t seq) {
  return static_cast<int32_t>(done - seq) >= 0;
}

}  // namespace

CommandRing::CommandRing(uint32_t entries, uint32_t max_pages,
                         uint32_t first_seq)
    : mask_(entries - 1),
      max_pages_(max_pages),
      slots_(entries),
      offsets_(new uint64_t[size_t{entries} * max_pages]),
      head_(first_seq),
      tail_(first_seq),
      next_seq_(first_seq == 0 ? 1 : first_seq),
      done_seq_(next_seq_ - 1) {
  for (uint32_t i = 0; i < entries; ++i) {
    slots_[i].offsets = offsets_.get() + size_t{i} * max_pages;
  }
}

template <typename Pred>
void CommandRing::ProducerWait(Pred ready) {
  if (ready() || aborted()) return;
  const uint64_t start = base::MonotonicNs();
  {
    std::unique_lock<std::mutex> lock(mu_);
    producer_waiting_.store(true, std::memory_order_seq_cst);
    while (!ready() && !aborted()) producer_cv_.wait(lock);
    producer_waiting_.store(false, std::memory_order_relaxed);
  }
  const uint64_t waited = base::MonotonicNs() - start;
  producer_wait_ns_.Add(waited);
  producer_wait_max_ns_.RaiseTo(waited);
}

Command* CommandRing::BeginPush() {
  ProducerWait([this] { return !Full(); });
  if (aborted()) return nullptr;
  return &slots_[head_.load(std::memory_order_relaxed) & mask_];
}

void CommandRing::CommitPush() {
  const uint32_t head = head_.load(std::memory_order_relaxed);
  const Command& c = slots_[head & mask_];
  if (c.type == CommandType::kWrite) pushed_pages_ += c.page_count;
  head_.store(head + 1, std::memory_order_seq_cst);
  max_occupancy_.RaiseTo(head + 1 - tail_.load(std::memory_order_relaxed));
  if (consumer_waiting_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> lock(mu_);
    consumer_cv_.notify_one();
  }
}

uint32_t CommandRing::PushBarrier(CommandType type, uint64_t round) {
  Command* c = BeginPush();
  if (c == nullptr) return 0;
  const uint32_t seq = next_seq_;
  next_seq_ = next_seq_ + 1 == 0 ? 1 : next_seq_ + 1;
  c->type = type;
  c->region = 0;
  c->page_count = 0;
  c->round = round;
  c->barrier_seq = seq;
  CommitPush();
  return seq;
}

bool CommandRing::WaitBarrier(uint32_t seq) {
  ProducerWait(
      [&] { return Reached(done_seq_.load(std::memory_order_seq_cst), seq); });
  return Reached(done_seq_.load(std::memory_order_seq_cst), seq);
}

uint32_t CommandRing::Peek(uint32_t max) const {
  uint32_t ready = head_.load(std::memory_order_seq_cst) -
                   tail_.load(std::memory_order_relaxed);
  return ready < max ? ready : max;
}

void CommandRing::WakeProducer() {
  if (producer_waiting_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> lock(mu_);
    producer_cv_.notify_all();
  }
}

void CommandRing::Release(uint32_t n) {
  uint64_t pages = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const Command& c = At(i);
    if (c.type == CommandType::kWrite) pages += c.page_count;
  }
  released_pages_.fetch_add(pages, std::memory_order_release);
  tail_.store(tail_.load(std::memory_order_relaxed) + n,
              std::memory_order_seq_cst);
  WakeProducer();
}

void CommandRing::CompleteBarrier(uint32_t seq) {
  done_seq_.store(seq, std::memory_order_seq_cst);
  WakeProducer();
}

bool CommandRing::WaitForWork(absl::Duration at_most) {
  if (!Empty() || aborted()) return !aborted();
  const uint64_t start = base::MonotonicNs();
  {
    std::unique_lock<std::mutex> lock(mu_);
    consumer_waiting_.store(true, std::memory_order_seq_cst);
    auto ready = [this] { return !Empty() || aborted(); };
    if (at_most == absl::InfiniteDuration()) {
      consumer_cv_.wait(lock, ready);
    } else {
      consumer_cv_.wait_for(lock, absl::ToChronoNanoseconds(at_most), ready);
    }
    consumer_waiting_.store(false, std::memory_order_relaxed);
  }
  consumer_idle_max_ns_.RaiseTo(base::MonotonicNs() - start);
  return !aborted();
}

void CommandRing::Abort() {
  aborted_.store(true, std::memory_order_seq_cst);
  std::lock_guard<std::mutex> lock(mu_);
  producer_cv_.notify_all();
  consumer_cv_.notify_all();
}

}  // namespace ramferry::engine
