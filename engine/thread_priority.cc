#include "engine/thread_priority.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

namespace ramferry::engine {

void RaiseRequestPathPriority() {
  // The lowest real-time priority: above every normal thread, below any
  // real-time thread the host already runs.
  sched_param param{};
  param.sched_priority = sched_get_priority_min(SCHED_RR);
  if (pthread_setschedparam(pthread_self(), SCHED_RR, &param) == 0) return;
  for (int nice = -20; nice < 0; nice += 5) {
    if (setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice) == 0) {
      return;
    }
  }
}

}  // namespace ramferry::engine
