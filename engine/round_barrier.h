// Destination round sync: a channel that reads the SYNC of round k parks
// here until every channel has read its SYNC of round k. Only then may any
// channel apply a round k+1 page, so a page re-sent in round k+1 can never
// be overwritten by its stale round-k copy arriving late on another channel.
//
// Surviving a lost channel (SessionOptions::survive_channel_loss): the
// source declares a dead channel gone, re-sends its batches of the open
// round on the others and follows them with one more SYNC of the same
// round on every survivor. So a round is gathered in generations: each
// removal in round k asks every remaining channel for one more SYNC of
// round k, and the round completes only at the last generation. A removed
// channel's pages in the round no longer count (the source sent them
// again elsewhere).
#ifndef RAMFERRY_ENGINE_ROUND_BARRIER_H_
#define RAMFERRY_ENGINE_ROUND_BARRIER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ramferry::engine {

class RoundBarrier {
 public:
  // `on_round_done(round, pages)` runs on the last channel to arrive,
  // before the others are released; an error from it aborts the barrier.
  // The parties are channels 0 .. parties-1.
  RoundBarrier(uint32_t parties,
               std::function<absl::Status(uint64_t, uint64_t)> on_round_done);
  // The parties are the channels `channels` (a lone ChannelReceiver of
  // channel k under test: {k}).
  RoundBarrier(absl::Span<const uint32_t> channels,
               std::function<absl::Status(uint64_t, uint64_t)> on_round_done);

  // `party` (a channel) arrives for `round` having applied `pages` pages since
  // its previous arrival. Returns once every remaining party arrived: true when
  // that completed the round, false when the round goes on (a removal asked
  // for another SYNC of it). ABORTED if the barrier was aborted meanwhile,
  // CANCELLED if `party` was detached.
  absl::StatusOr<bool> Arrive(uint32_t party, uint64_t round, uint64_t pages);

  // Releases `party` from a wait in Arrive and fails its later arrivals,
  // without changing what the others wait for: its thread can stop before
  // RemoveParty makes the round go on without it.
  void Detach(uint32_t party);

  // The round barrier stops waiting for `party`, which the source declared
  // gone as of `declared_round` (the oldest round it had not seen
  // confirmed). Returns the round the removal took effect in: the declared
  // one, or the next when the declared round had already completed, with
  // this party's SYNC. The removal asks each remaining party for one more
  // SYNC of that round. INVALID_ARGUMENT for a party removed twice or a
  // declared round that is neither the open round nor the one before.
  absl::StatusOr<uint64_t> RemoveParty(uint32_t party, uint64_t declared_round);

  void Abort();
  uint64_t completed_rounds() const;
  // Parties not removed.
  uint32_t remaining() const;

 private:
  struct Party {
    bool arrived = false;  // in the current generation
    bool detached = false;
    bool removed = false;
    uint64_t pages = 0;  // in the open round
  };
  // The party of channel `party`, or nullptr. Needs mu_.
  Party* Find(uint32_t party);
  // Every remaining party arrived: completes the round or, when removals
  // asked for more SYNCs of it, releases the generation. Needs mu_.
  absl::Status Advance();

  const std::function<absl::Status(uint64_t, uint64_t)> on_round_done_;
  mutable std::mutex mu_;
  std::condition_variable released_;
  // Guarded by mu_.
  std::map<uint32_t, Party> parties_;  // by channel
  uint32_t remaining_ = 0;
  uint32_t arrived_ = 0;
  uint32_t generation_ = 1;   // of the open round, from 1
  uint32_t generations_ = 1;  // the open round needs; 1 + its removals
  uint64_t releases_ = 0;     // generations released so far, all rounds
  uint64_t completed_ = 0;    // rounds completed
  bool aborted_ = false;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_ROUND_BARRIER_H_
