#include "engine/postcopy/thread_priority.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <utility>

namespace ramferry::engine {

void SetRequestPathPriority(bool raised, int normal_nice) {
  const id_t tid = static_cast<id_t>(gettid());
  sched_param param{};
  if (!raised) {
    // Back from either: the normal class at the thread's own nice.
    pthread_setschedparam(pthread_self(), SCHED_OTHER, &param);
    setpriority(PRIO_PROCESS, tid, normal_nice);
    return;
  }
  // The lowest real-time priority: above every normal thread, below any
  // real-time thread the host already runs.
  param.sched_priority = sched_get_priority_min(SCHED_RR);
  if (pthread_setschedparam(pthread_self(), SCHED_RR, &param) == 0) return;
  for (int nice = -20; nice < 0; nice += 5) {
    if (setpriority(PRIO_PROCESS, tid, nice) == 0) return;
  }
}

RequestPathPriority::RequestPathPriority(std::function<void(bool)> apply)
    : apply_(std::move(apply)) {
  if (apply_ == nullptr) {
    const int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
    apply_ = [nice](bool raised) { SetRequestPathPriority(raised, nice); };
  }
  apply_(true);
}

void RequestPathPriority::Worked(uint64_t units) {
  busy_ += units;
  if (raised_ && busy_ > kBusyLimit) {
    raised_ = false;
    apply_(false);
  }
}

void RequestPathPriority::Idle() {
  busy_ = 0;
  if (!raised_) {
    raised_ = true;
    apply_(true);
  }
}

}  // namespace ramferry::engine
