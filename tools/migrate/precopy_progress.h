// The source's progress line: what the migration thread publishes of
// its rounds (LiveState), and the thread that redraws the line from it
// and from the session's counters every 250 ms.
#ifndef RAMFERRY_TOOLS_MIGRATE_PRECOPY_PROGRESS_H_
#define RAMFERRY_TOOLS_MIGRATE_PRECOPY_PROGRESS_H_

#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "ramferry/sender.h"
#include "tools/common/cli.h"

namespace ramferry::migrate {

// What the progress line shows, published by the migration thread.
struct LiveState {
  std::atomic<uint64_t> round{0};
  std::atomic<uint64_t> round_pages{0};
  std::atomic<uint64_t> pages_before_round{0};
  std::atomic<uint64_t> dirty_rate_bits{0};  // double, bit-cast
  std::atomic<uint64_t> estimate_bits{0};    // double, bit-cast
  std::atomic<bool> final_round{false};
  std::atomic<bool> postcopy{false};  // switched: pages go on demand
  // The session's Sender: a resumed post-copy has a new one (the cut one
  // lives on until the run ends).
  std::atomic<const Sender*> sender{nullptr};
  std::atomic<int> throttle{0};  // auto-converge's, percent

  static uint64_t Bits(double d) { return std::bit_cast<uint64_t>(d); }
  static double Value(const std::atomic<uint64_t>& a) {
    return std::bit_cast<double>(a.load());
  }
};

// Redraws the progress line while a migration runs.
class ProgressThread {
 public:
  ProgressThread(bool enabled, const LiveState* state) : line_(enabled, 1.0) {
    if (!enabled) return;
    thread_ = std::thread([this, state] { Run(*state); });
  }
  ~ProgressThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    line_.Done();
  }

 private:
  void Run(const LiveState& s);

  cli::ProgressLine line_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
};

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_PRECOPY_PROGRESS_H_
