// Proof of life on the control connection. A peer that is stopped
// (SIGSTOP, a hung VM, a frozen host) keeps its TCP connections open and
// its kernel keeps ACKing, so only silence on the application level tells
// it from a peer that merely has nothing to say. Each end sends a
// HEARTBEAT every stall_timeout / 4 from a thread of its own (so a long
// digest or a blocked send elsewhere does not silence it), and each end
// treats stall_timeout without any control message as a stalled peer.
#ifndef RAMFERRY_ENGINE_HEARTBEAT_H_
#define RAMFERRY_ENGINE_HEARTBEAT_H_

#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/time/time.h"
#include "engine/control.h"

namespace ramferry::engine {

// The interval that keeps a peer with `stall_timeout` satisfied with room
// for three lost beats' worth of scheduling delay.
absl::Duration HeartbeatInterval(absl::Duration stall_timeout);

class HeartbeatSender {
 public:
  // Starts sending at once; `control` must outlive this object.
  HeartbeatSender(ControlChannel* control, absl::Duration interval);
  ~HeartbeatSender();  // stops and joins
  HeartbeatSender(const HeartbeatSender&) = delete;
  HeartbeatSender& operator=(const HeartbeatSender&) = delete;

  void Stop();

 private:
  void Run();

  ControlChannel* const control_;
  const absl::Duration interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_HEARTBEAT_H_
