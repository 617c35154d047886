#include "engine/heartbeat.h"

#include <algorithm>

#include "proto/control.h"

namespace ramferry::engine {

absl::Duration HeartbeatInterval(absl::Duration stall_timeout) {
  return std::max(stall_timeout / 4, absl::Milliseconds(5));
}

HeartbeatSender::HeartbeatSender(ControlChannel* control,
                                 absl::Duration interval)
    : control_(control), interval_(interval) {
  thread_ = std::thread([this] { Run(); });
}

HeartbeatSender::~HeartbeatSender() { Stop(); }

void HeartbeatSender::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HeartbeatSender::Run() {
  const std::vector<uint8_t> beat = proto::EncodeHeartbeat();
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, absl::ToChronoNanoseconds(interval_),
                       [&] { return stop_; })) {
    lock.unlock();
    // A failed send means the connection is gone; whoever reads it says
    // so with the real cause, so the beat just stops.
    const bool sent = control_->Send(beat).ok();
    lock.lock();
    if (!sent) return;
  }
}

}  // namespace ramferry::engine
