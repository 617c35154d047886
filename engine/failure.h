// The first error of a session, from whichever thread sees it first.
// Recording it runs the session's teardown once (abort the rings, shut the
// sockets) so every other thread unblocks and winds down.
#ifndef RAMFERRY_ENGINE_FAILURE_H_
#define RAMFERRY_ENGINE_FAILURE_H_

#include <atomic>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace ramferry::engine {

class SessionFailure {
 public:
  // `on_first_failure` runs once, on the thread that recorded the failure,
  // outside the lock.
  explicit SessionFailure(std::function<void(const absl::Status&)> on_first)
      : on_first_(std::move(on_first)) {}

  // Records `status` unless a failure is already recorded; true if this
  // call recorded it.
  bool Fail(absl::Status status) {
    {
      absl::MutexLock lock(&mu_);
      if (failed_.load(std::memory_order_relaxed)) return false;
      status_ = std::move(status);
      failed_.store(true, std::memory_order_release);
    }
    on_first_(this->status());
    return true;
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  absl::Status status() const {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  const std::function<void(const absl::Status&)> on_first_;
  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> failed_{false};
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_FAILURE_H_
