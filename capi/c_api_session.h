// The session handles of the C API (ramferry_regions, ramferry_sender,
// ramferry_receiver) and what their parts share: progress reports,
// versioned structs copied out, the options a session starts with.
#ifndef RAMFERRY_CAPI_C_API_SESSION_H_
#define RAMFERRY_CAPI_C_API_SESSION_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "capi/c_api_util.h"
#include "ramferry/ramferry.h"
#include "ramferry/receiver.h"
#include "ramferry/region.h"
#include "ramferry/sender.h"
#include "ramferry/stats.h"

namespace ramferry::capi {

// Calls `fn(session_stats)` every `interval` on a thread of its own while
// a Scope lives: the progress reports of a blocking call.
class Progress {
 public:
  void Set(ramferry_progress_fn fn, void* user, uint32_t interval_ms) {
    fn_ = fn;
    user_ = user;
    interval_ms_ = interval_ms;
  }
  void CopySettings(const Progress& other) {
    Set(other.fn_, other.user_, other.interval_ms_);
  }
  // One call at a time: the interval thread and the round's own report
  // never call the caller's function together.
  void Report(const ramferry::SessionStats& stats, bool round_done) const {
    if (fn_ == nullptr) return;
    std::lock_guard<std::mutex> lock(report_mu_);
    ramferry_progress p{};
    p.size = sizeof(p);
    p.round_done = round_done ? 1 : 0;
    p.rounds = stats.rounds;
    const ramferry::ChannelStats total = stats.Total();
    p.pages = total.pages;
    p.payload_bytes = total.payload_bytes;
    p.header_bytes = total.header_bytes;
    fn_(&p, user_);
  }
  bool enabled() const { return fn_ != nullptr; }

  // While it lives, reports stats() every interval from a thread.
  class Scope {
   public:
    Scope(const Progress& progress,
          std::function<ramferry::SessionStats()> stats) {
      if (progress.fn_ == nullptr || progress.interval_ms_ == 0) return;
      thread_ = std::thread([this, &progress, stats = std::move(stats)] {
        std::unique_lock<std::mutex> lock(mu_);
        while (!done_) {
          if (cv_.wait_for(lock,
                           std::chrono::milliseconds(progress.interval_ms_),
                           [this] { return done_; })) {
            break;
          }
          lock.unlock();
          progress.Report(stats(), false);
          lock.lock();
        }
      });
    }
    ~Scope() {
      if (!thread_.joinable()) return;
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_ = true;
      }
      cv_.notify_all();
      thread_.join();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
  };

 private:
  mutable std::mutex report_mu_;
  ramferry_progress_fn fn_ = nullptr;
  void* user_ = nullptr;
  uint32_t interval_ms_ = 0;
};

// Copies `full` into the caller's struct of `size` bytes (its first
// field): an older caller gets the fields it has room for.
template <typename T>
ramferry_status CopyOut(T* out, const T& full) {
  if (out->size < sizeof(uint32_t)) {
    return Fail(nullptr, absl::InvalidArgumentError(
                             "the struct's size field is not set (set it to "
                             "sizeof the struct)"));
  }
  const uint32_t size = out->size;
  std::memcpy(out, &full, std::min<size_t>(size, sizeof(T)));
  out->size = size;
  return RAMFERRY_OK;
}

// The session's counters as the C struct, copied out as CopyOut does.
ramferry_status FillStats(const ramferry::SessionStats& s, uint64_t rounds,
                          ramferry_stats* out);
// A round's result as the C struct; nothing where `out` is NULL.
ramferry_status FillRound(const ramferry::RoundResult& round,
                          ramferry_round_result* out);
// The options a session starts with: "auto" resolved on the source.
absl::StatusOr<ramferry::SessionOptions> SessionFor(
    const ramferry_options& options, bool source,
    std::vector<std::string>* warnings);
absl::Status CheckRegions(const ramferry_regions* regions);
// One per-channel counter of `stats`, by its name in
// RAMFERRY_CHANNEL_COUNTERS.
ramferry_status ChannelCounter(const ramferry::SessionStats& stats,
                               uint32_t channel, const char* name,
                               uint64_t* value);

}  // namespace ramferry::capi

struct ramferry_regions {
  std::vector<ramferry::Region> regions;
  std::string error;
};

struct ramferry_sender {
  std::vector<ramferry::Region> regions;  // the Sender's span points here
  std::unique_ptr<ramferry::Sender> sender;
  std::vector<std::string> warnings;
  ramferry::capi::Progress progress;
  std::string error;
};

struct ramferry_receiver {
  std::vector<ramferry::Region> regions;  // the Receiver's span points here
  std::unique_ptr<ramferry::Receiver> receiver;
  ramferry::capi::Progress progress;
  std::string error;
};

#endif  // RAMFERRY_CAPI_C_API_SESSION_H_
