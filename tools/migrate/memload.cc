#include "tools/migrate/memload.h"

#include <chrono>
#include <cstring>

#if defined(__SANITIZE_THREAD__)
// A live migration reads pages while the workload writes them: the channel
// threads' sendmsg reads race with these stores by design, and dirty
// tracking re-sends every page written after it was read. TSan sees the
// race through its sendmsg interceptor; it is the migration contract, not
// a bug, so it is suppressed here and only here.
extern "C" const char* __tsan_default_suppressions() {
  return "race:ramferry::migrate::Memload::Writer\n";
}
#endif

namespace ramferry::migrate {

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

void Memload::Pause() {
  std::unique_lock<std::mutex> lock(mu_);
  paused_.store(true);
  cv_.wait(lock, [&] {
    return parked_ == static_cast<int>(threads_.size()) || stop_.load();
  });
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
  while (ParkIfPaused()) {
    owed += per_tick;
    for (; owed >= 1; owed -= 1) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const uint64_t page = (x >> 11) % set;
      // A new word in the page: its content really changes. Atomic, as
      // two writers may pick the same word.
      uint64_t* word =
          reinterpret_cast<uint64_t*>(base_ + page * 4096) + (x >> 55) % 512;
      std::atomic_ref<uint64_t>(*word).store(x, std::memory_order_relaxed);
      if (tracker_ != nullptr) tracker_->MarkWritten(page);
      written_.fetch_add(1, std::memory_order_relaxed);
    }
    next += std::chrono::milliseconds(1);
    std::this_thread::sleep_until(next);
  }
}

}  // namespace ramferry::migrate
