// The destination end of a transfer session: listens, accepts one source,
// and writes its pages into the registered regions until FINISH.
//
//   auto rx = ramferry::Receiver::Listen(opt, regions);
//   std::cout << "listening on " << (*rx)->port();
//   absl::Status s = (*rx)->Serve();   // blocks until FINISH or an error
#ifndef RAMFERRY_RECEIVER_H_
#define RAMFERRY_RECEIVER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ramferry/options.h"
#include "ramferry/region.h"
#include "ramferry/stats.h"

namespace ramferry {

class ReceiverImpl;

class Receiver {
 public:
  // Binds and listens; `regions` must outlive the Receiver. The source's
  // region table must match them (ids, lengths, page sizes).
  static absl::StatusOr<std::unique_ptr<Receiver>> Listen(
      const SessionOptions& options, absl::Span<const Region> regions);
  ~Receiver();

  uint16_t port() const;

  // Serves one session to its end: OK once the source finished and every
  // channel's data is in place (the commit point: see OnCommit);
  // otherwise the error that ended it, naming the channel and the cause.
  absl::Status Serve();

  // Ends Serve() from any thread.
  void Abort(const absl::Status& reason);

  // The destination's commit point: `commit` runs once, on the control
  // thread, when the source's FINISH arrived and every page is in place,
  // right before the destination confirms it (FINISH_ACK). Once it
  // returned OK the source may take the migration as done, so nothing
  // should end the session from then on (a caller that cancels on request
  // refuses to from here). An error from it refuses the FINISH instead:
  // the session fails with that error, which goes to the source as its
  // proof that the destination did not commit (Sender::finish_outcome()
  // kNotCommitted: it may resume its workload). An Abort() before the
  // commit refuses the same way; once committed, Serve() returns OK
  // whatever comes after (an Abort, the confirmation lost: the source then
  // keeps its workload paused and this side runs it). With post-copy the
  // commit point is the switch instead: `commit` runs when the source's
  // MISSING_PAGES arrive, before any page is dropped, and not again at
  // FINISH; a refusal, or a failure before the destination armed, reaches
  // the source the same way. Set before Serve(); keep it short.
  void OnCommit(std::function<absl::Status()> commit);

  // ---- carried streams (SessionOptions::streams; docs/streams.md) ----
  // Connects a peer for stream `stream` (the destination QEMU's incoming
  // socket): returns a connected socket, which the Receiver then owns, or
  // the reason there is none (it ends the session, and reaches the
  // source). Called on the control thread, once per stream, in the order
  // the source's peer connected, each only after the one before it was
  // connected. Stream s's bytes are then written to it as they come, and
  // what the peer writes back goes to the source's peer. Set before
  // Serve(). Without it a stream session fails at its first stream.
  void OnStreamOpen(std::function<absl::StatusOr<int>(uint32_t stream)> open);

  // ---- post-copy (SessionOptions::postcopy) ----
  // Called once, on the control thread, when the destination has armed:
  // every page it lacks now faults and is fetched on demand, so the
  // workload may resume here. Set before Serve(); keep it short.
  void OnPostcopyArmed(std::function<void()> armed);
  // Once armed, until Serve() returns (any thread): whether no page of
  // [first_page, first_page + pages) of region `region_id` is still
  // awaited from the source (true before the switch; false for a range
  // outside the region).
  bool IsResident(uint32_t region_id, uint64_t first_page,
                  uint64_t pages) const;
  // Blocks until IsResident, `deadline` (DeadlineExceeded) or the end of
  // the session (its status, or Cancelled).
  absl::Status WaitResident(uint32_t region_id, uint64_t first_page,
                            uint64_t pages, absl::Time deadline);
  // Asks the source for the awaited pages of the range at once, as a
  // fault would: for a caller that handles its own faults or knows what
  // it will touch next. FailedPrecondition before the switch. Any thread,
  // at any time: while a cut session waits to be resumed
  // (postcopy_resume_timeout), the request is kept and sent once a
  // session resumes, as the faults it stands for are.
  absl::Status RequestPages(uint32_t region_id, uint64_t first_page,
                            uint64_t pages);
  // After Serve() failed in post-copy: the awaited pages are lost with the
  // source, so fills each with zeros and lets the faulting threads run on
  // memory that is no longer the source's. Only for a workload about to
  // be discarded; returns the pages filled. Without it the threads stay
  // blocked, also after the Receiver is destroyed: it then keeps the
  // regions' userfaultfds open on purpose (closing them would let the
  // kernel hand the threads fresh zero pages, unasked), until the process
  // ends. Nothing runs on zeros unless this is called.
  absl::StatusOr<uint64_t> ReleasePostcopy();

  SessionStats stats() const;
  // Rounds fully applied so far.
  uint64_t applied_rounds() const;
  // Pages whose digests the source asked for (Sender::Verify). After a
  // successful Serve, equal to the total page count when the source
  // verified everything before finishing.
  uint64_t verified_pages() const;

 private:
  explicit Receiver(std::unique_ptr<ReceiverImpl> impl);
  std::unique_ptr<ReceiverImpl> impl_;
};

}  // namespace ramferry

#endif  // RAMFERRY_RECEIVER_H_
