#include "tools/migrate/memload.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "ramferry/region.h"

namespace ramferry::migrate {
namespace {

// A live migration reads pages while the workload writes them: the channel
// threads' reads (sendmsg, the zero-page test) race with this store by
// design, and dirty tracking re-sends every page written after it was
// read. So the store is kept out of TSan's sight, here and only here. (A
// suppression by this stack missed whenever TSan could no longer restore
// it: a CI run under load reported the race with "failed to restore the
// stack".) Atomic, as two writers may pick the same word.
__attribute__((no_sanitize("thread"), noinline)) void StorePageWord(
    uint64_t* word, uint64_t x) {
  __atomic_store_n(word, x, __ATOMIC_RELAXED);
}

}  // namespace

Memload::Memload(uint8_t* base, uint64_t pages, const Options& options,
                 DirtyTracker* tracker)
    : base_(base), pages_(pages), options_(options), tracker_(tracker) {}

Memload::~Memload() { Stop(); }

void Memload::Start() {
  if (started_ || options_.pages_per_second <= 0 ||
      options_.dirty_set_pages == 0) {
    return;
  }
  started_ = true;
  for (int i = 0; i < options_.writers; ++i) {
    threads_.emplace_back([this, i] { Writer(i); });
  }
}

absl::Status Memload::Pause() {
  std::unique_lock<std::mutex> lock(mu_);
  paused_.store(true);
  cv_.wait(lock, [&] {
    return parked_ == static_cast<int>(threads_.size()) || stop_.load();
  });
  return absl::OkStatus();
}

void Memload::Resume() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_.store(false);
  cv_.notify_all();
}

void Memload::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    cv_.notify_all();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void Memload::Abandon() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    cv_.notify_all();
  }
  for (std::thread& t : threads_) t.detach();
  threads_.clear();
}

bool Memload::ParkIfPaused() {
  if (paused_.load()) {
    std::unique_lock<std::mutex> lock(mu_);
    ++parked_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !paused_.load() || stop_.load(); });
    --parked_;
  }
  // Checked after parking too: a writer released by Stop() must not write.
  return !stop_.load();
}

void Memload::Writer(int index) {
  using Clock = std::chrono::steady_clock;
  // Each writer paces itself in 1 ms ticks and owns every N-th page of the
  // dirty set, walking it with a stride so consecutive writes land on
  // different pages.
  const double per_tick = options_.pages_per_second / options_.writers / 1000.0;
  const uint64_t set = std::min(options_.dirty_set_pages, pages_);
  uint64_t x = options_.seed * 0x9E3779B97F4A7C15ull + index;
  double owed = 0;
  auto next = Clock::now();
  // A writer that fell behind (its CPU taken) catches up at most this
  // many ticks at once: a burst of stores is time the pause waits for.
  constexpr double kMaxTicksOwed = 10;
  while (ParkIfPaused()) {
    owed += per_tick * (100 - throttle_.load(std::memory_order_relaxed)) / 100;
    owed = std::min(owed, per_tick * kMaxTicksOwed);
    for (uint64_t n = 0; owed >= 1; owed -= 1, ++n) {
      // The pause takes effect within a few stores, not after the tick's.
      if (n % 64 == 63 && paused_.load(std::memory_order_relaxed)) break;
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const uint64_t page = (x >> 11) % set;
      auto* words = reinterpret_cast<uint64_t*>(base_ + page * kPageSize);
      if (options_.whole_pages) {
        uint64_t w = x;
        for (size_t i = 0; i < kPageSize / 8; ++i) {
          w = w * 6364136223846793005ull + 1442695040888963407ull;
          StorePageWord(words + i, w);
        }
      } else {
        // A new word in the page: its content really changes.
        StorePageWord(words + (x >> 55) % 512, x);
      }
      if (tracker_ != nullptr) tracker_->MarkWritten(page);
      written_.fetch_add(1, std::memory_order_relaxed);
    }
    next += std::chrono::milliseconds(1);
    std::this_thread::sleep_until(next);
  }
}

}  // namespace ramferry::migrate
