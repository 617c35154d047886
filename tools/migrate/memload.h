// memload: the built-in workload. The region is filled once with random
// bytes; then writer threads keep rewriting pages of a fixed dirty set at a
// steady rate, the way a running guest keeps touching its working set.
#ifndef RAMFERRY_TOOLS_MIGRATE_MEMLOAD_H_
#define RAMFERRY_TOOLS_MIGRATE_MEMLOAD_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "tools/migrate/dirty_tracker.h"
#include "tools/migrate/workload.h"

namespace ramferry::migrate {

class Memload final : public Workload {
 public:
  struct Options {
    uint64_t dirty_set_pages = 0;  // the first N pages of the region
    double pages_per_second = 0;   // over all writers; 0: no writers
    int writers = 1;
    uint64_t seed = 1;
    bool whole_pages = false;  // a write rewrites its page, not one word
  };

  // `tracker` (may be null) hears of every write, for bitmap tracking.
  Memload(uint8_t* base, uint64_t pages, const Options& options,
          DirtyTracker* tracker);
  ~Memload() override;

  // Starts the writers (no-op at rate 0).
  void Start();
  // Returns once no writer is writing, and none will until Resume().
  absl::Status Pause() override;
  void Resume() override;
  void Stop() override;
  // Stops the writers without waiting for them: for writers blocked for
  // good on memory that will never come (a failed post-copy whose pages
  // could not be released), which end with the process.
  void Abandon();

  // Slows every writer to (100 - percent)% of its rate (auto-converge's
  // throttle; 0: full rate). Any thread.
  bool can_throttle() const override { return true; }
  void SetThrottle(int percent) override { throttle_.store(percent); }
  int throttle() const { return throttle_.load(); }

  std::optional<uint64_t> pages_written() const override {
    return written_.load();
  }
  uint64_t written() const { return written_.load(); }
  bool running() const override {
    return started_ && !paused_.load() && !stop_.load();
  }

 private:
  void Writer(int index);
  // Parks while paused; false once the writers must stop.
  bool ParkIfPaused();

  uint8_t* const base_;
  const uint64_t pages_;
  const Options options_;
  DirtyTracker* const tracker_;
  std::vector<std::thread> threads_;
  bool started_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<bool> paused_{false};
  std::atomic<uint64_t> written_{0};
  std::atomic<int> throttle_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  int parked_ = 0;  // guarded by mu_
};

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_MEMLOAD_H_
