// The source's record of its lost data channels, where the session
// survives channel loss: the deaths reported and not yet declared, oldest
// first; the channels declared gone; the destination's acknowledgements,
// each with the round from which the session went on without the channel;
// the report of each loss; and the pages re-sent for them.
//
// Thread-safe. Channel threads and the control thread report deaths and
// acknowledgements; the caller's thread declares. A death is declared at
// most once, however often it is reported (both ends may see it). The
// record never waits: the session waits on its own condition and asks
// the record (pending, acknowledged) while it does.
#ifndef RAMFERRY_ENGINE_CHANNEL_LOSSES_H_
#define RAMFERRY_ENGINE_CHANNEL_LOSSES_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ramferry/stats.h"

namespace ramferry::engine {

class ChannelLosses {
 public:
  // Before any report: the session's data channels.
  void SetChannels(size_t channels);

  // Any thread: `channel` died of `cause`.
  void Report(uint32_t channel, const absl::Status& cause);
  // Whether a reported death waits to be declared (or found declared).
  bool pending() const;
  // The oldest reported death of a channel not declared yet; the reports
  // of channels already declared are dropped on the way.
  std::optional<std::pair<uint32_t, absl::Status>> TakeNext();

  // Caller's thread: `channel` is gone as of round `declared` (reported
  // as that until Settle). Returns the losses so far, described.
  std::string Declare(uint32_t channel, uint64_t declared,
                      const absl::Status& cause);
  bool lost(uint32_t channel) const;
  // Channels not declared gone.
  size_t live() const;

  // The control thread: the destination's CHANNEL_GONE_ACK, refused for a
  // channel out of range or acknowledged before.
  absl::Status Acknowledge(uint32_t channel, uint64_t round);
  // The round of the destination's acknowledgement, once it came.
  std::optional<uint64_t> acknowledged(uint32_t channel) const;
  // The loss of `channel` is reported as of `round`, as the destination
  // reports it.
  void Settle(uint32_t channel, uint64_t round);

  void AddResent(uint64_t pages);

  // At the end, when every round was confirmed: each reported death not
  // declared is recorded as of `round`, with nothing missing.
  void RecordUndeclared(uint64_t round);

  std::vector<ChannelLoss> reports() const;
  uint64_t resent_pages() const;

 private:
  mutable std::mutex mu_;
  std::vector<bool> lost_;  // per channel, declared gone
  std::deque<std::pair<uint32_t, absl::Status>> reported_;
  std::map<uint32_t, uint64_t> acks_;  // channel -> effective round
  std::vector<ChannelLoss> reports_;
  uint64_t resent_pages_ = 0;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_CHANNEL_LOSSES_H_
