// The post-copy request path's threads ahead of bulk work on a busy host,
// for short stretches only.
//
// A faulting thread waits on three threads in turn: the destination's
// fault reader, the source's urgent thread, the destination's urgent
// thread. Each does a few microseconds of work per request, but on a host
// whose cores the bulk channels and the workload keep busy the scheduler
// can leave a woken one waiting for a time slice (milliseconds), and that
// wait is the fault's tail latency. These threads therefore ask for the
// round-robin real-time class at a low priority, so they run as soon as
// they wake. Where the class is not allowed (no CAP_SYS_NICE, an
// RLIMIT_RTPRIO of 0) the best nice value allowed is the fallback; where
// neither is, they run as they are.
//
// Real time is held only while the work between two waits stays short.
// A stream of requests (RequestPages over a whole region, many faulting
// threads, a hostile peer) would keep such a thread runnable for good and
// starve every normal thread on its CPU: the bulk channels, the
// heartbeat, the network's softirq work, and, on a host that set
// sched_rt_runtime_us to -1, without even the kernel's 5% left to them.
// So past kBusyLimit units of work without running out of it, the thread
// goes back to the normal class, and rises again when it next finds
// nothing to do.
#ifndef RAMFERRY_ENGINE_POSTCOPY_THREAD_PRIORITY_H_
#define RAMFERRY_ENGINE_POSTCOPY_THREAD_PRIORITY_H_

#include <cstdint>
#include <functional>

namespace ramferry::engine {

// Puts the calling thread in the request path's class (raised: true) or
// back in the normal one at `normal_nice` (false); best effort.
void SetRequestPathPriority(bool raised, int normal_nice);

// One request-path thread's priority; used by that thread only.
class RequestPathPriority {
 public:
  // A unit is one answer or placement of at most a PAGE_DATA frame (256
  // KiB), or one batch of faults: 16 of them are a few milliseconds.
  static constexpr uint64_t kBusyLimit = 16;

  // Raises the calling thread. `apply` changes it (tests pass their own);
  // by default SetRequestPathPriority, lowering to the thread's nice value
  // as it was here.
  explicit RequestPathPriority(std::function<void(bool)> apply = nullptr);

  // `units` of work done without waiting; past kBusyLimit since the last
  // Idle, the thread goes back to the normal class.
  void Worked(uint64_t units = 1);
  // The thread found nothing to do and is about to wait: raised again.
  void Idle();
  bool raised() const { return raised_; }

 private:
  std::function<void(bool)> apply_;
  uint64_t busy_ = 0;
  bool raised_ = true;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_POSTCOPY_THREAD_PRIORITY_H_
