// The first error of a session, from whichever thread sees it first.
// Recording it runs the session's teardown once (abort the rings, shut the
// sockets) so every other thread unblocks and winds down.
//
// Locks here and across the engine are std::mutex, not absl::Mutex: the
// distribution's Abseil is not built with ThreadSanitizer, so TSan could
// not see absl::Mutex synchronise anything.
#ifndef RAMFERRY_ENGINE_FAILURE_H_
#define RAMFERRY_ENGINE_FAILURE_H_

#include <atomic>
#include <functional>
#include <mutex>
#include <utility>

#include "absl/status/status.h"

namespace ramferry::engine {

// Where a failure came from, which decides whether the peer must be told.
enum class Origin {
  kLocal,          // found here: tell the peer
  kLocalReported,  // found here, and the peer was already told
  kPeer,           // the peer's own ERROR message
};

class SessionFailure {
 public:
  // `on_first(status, origin)` runs once, on the thread that recorded the
  // failure, outside the lock.
  explicit SessionFailure(
      std::function<void(const absl::Status&, Origin)> on_first)
      : on_first_(std::move(on_first)) {}

  // Records `status` unless a failure is already recorded; true if this
  // call recorded it.
  bool Fail(absl::Status status, Origin origin = Origin::kLocal) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_.load(std::memory_order_relaxed)) return false;
      status_ = std::move(status);
      origin_ = origin;
      failed_.store(true, std::memory_order_release);
    }
    on_first_(this->status(), origin);
    return true;
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Forgets the failure, so a resumed session can fail (and tear down)
  // again. Only with every thread that reports here stopped.
  void Reset() {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = absl::OkStatus();
    origin_ = Origin::kLocal;
    failed_.store(false, std::memory_order_release);
  }
  absl::Status status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }
  Origin origin() const {
    std::lock_guard<std::mutex> lock(mu_);
    return origin_;
  }

 private:
  const std::function<void(const absl::Status&, Origin)> on_first_;
  mutable std::mutex mu_;
  absl::Status status_;             // guarded by mu_
  Origin origin_ = Origin::kLocal;  // guarded by mu_
  std::atomic<bool> failed_{false};
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_FAILURE_H_
