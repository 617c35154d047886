// The post-copy request path's threads ahead of bulk work on a busy host.
//
// A faulting thread waits on three threads in turn: the destination's
// fault reader, the source's urgent thread, the destination's urgent
// thread. Each does a few microseconds of work per request, but on a host
// whose cores the bulk channels and the workload keep busy the scheduler
// can leave a woken one waiting for a time slice (milliseconds), and that
// wait is the fault's tail latency. These threads therefore ask for the
// round-robin real-time class at a low priority: they run as soon as they
// wake, and, as they block again after each request, cannot starve the
// rest. Where the class is not allowed (no CAP_SYS_NICE, an RLIMIT_RTPRIO
// of 0) the best nice value allowed is the fallback; where neither is,
// they run as they are.
#ifndef RAMFERRY_ENGINE_THREAD_PRIORITY_H_
#define RAMFERRY_ENGINE_THREAD_PRIORITY_H_

namespace ramferry::engine {

// For the calling thread; best effort.
void RaiseRequestPathPriority();

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_THREAD_PRIORITY_H_
