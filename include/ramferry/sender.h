// The source end of a transfer session.
//
//   ramferry::SessionOptions opt;
//   opt.host = "10.0.0.2"; opt.port = 7070; opt.channels = 4;
//   opt.auth_key = key;  // the destination's too (or opt.insecure = true)
//   auto sender = ramferry::Sender::Connect(opt, regions);
//   if (!sender.ok()) return sender.status();
//   ramferry::DirtyBitmap dirty(regions[0].page_count());
//   dirty.SetAll();                               // round 0: every page
//   ramferry::DirtyBitmap* bitmaps[] = {&dirty};  // one per region
//   auto round = (*sender)->SendRound(bitmaps);
//   if (!round.ok()) return round.status();
//   // ... mark pages written since, SendRound again ...
//   return (*sender)->Finish();
//
// (tests/examples compiles this example in every build.)
//
// Thread-compatible: one thread drives a Sender; stats() may be called from
// any thread.
#ifndef RAMFERRY_SENDER_H_
#define RAMFERRY_SENDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/options.h"
#include "ramferry/region.h"
#include "ramferry/stats.h"

namespace ramferry {

struct RoundResult {
  uint64_t round = 0;
  uint64_t pages = 0;
  uint64_t bytes = 0;
  absl::Duration elapsed;
};

struct VerifyReport {
  uint64_t pages_checked = 0;
  uint64_t pages_mismatched = 0;
  // Up to 16 mismatched pages, as (region id, page index).
  std::vector<std::pair<uint32_t, uint64_t>> first_mismatches;
  bool ok() const { return pages_mismatched == 0; }
};

// Where the destination stands on the session's commit point, for the
// caller to decide on its own copy of the workload (Sender::commit_outcome).
// The commit point is the control FINISH (Finish), or post-copy's switch
// (StartPostcopy's MISSING_PAGES).
enum class CommitOutcome {
  // No commit point reached (not yet, or under way) and no failure.
  kPending,
  // The destination confirmed: Finish returned OK, or post-copy armed. It
  // owns the memory.
  kCommitted,
  // The destination did not commit, and discards what it received: the
  // session failed before the commit point, or the destination refused
  // it with its own ERROR (its commit hook, a cancel there, pages no tag
  // vouched for). The source's workload may resume.
  kNotCommitted,
  // The commit point passed and neither the confirmation nor a refusal
  // came: the destination may have committed and run the memory. Do not
  // resume.
  kUnknown,
};
// "pending", "committed", "not-committed", "unknown".
const char* CommitOutcomeName(CommitOutcome outcome);

class SenderImpl;

class Sender {
 public:
  // Connects to the destination, agrees on the regions and opens every
  // channel. `regions` must outlive the Sender.
  static absl::StatusOr<std::unique_ptr<Sender>> Connect(
      const SessionOptions& options, absl::Span<const Region> regions);
  ~Sender();

  // Sends every page marked in `dirty` (one bitmap per region, in the
  // order the regions were given) and clears the bits it takes. Returns
  // once every channel has flushed its completions and the destination has
  // applied the whole round. On error the session is over.
  absl::StatusOr<RoundResult> SendRound(absl::Span<DirtyBitmap* const> dirty);

  // SendRound in two halves, so rounds can overlap: StartRound takes and
  // queues the pages marked in `dirty` and returns without waiting (the
  // next round's dirty scan and batches can then overlap this round's
  // tail, and its batches follow this round's on the wire with no idle
  // gap); AwaitRound waits for the oldest started round as SendRound
  // does and returns its result. Rounds are confirmed in order. Verify
  // and Finish await every started round first; SendRound refuses while
  // one is pending. With survive_channel_loss, StartRound completes the
  // round before returning.
  absl::Status StartRound(absl::Span<DirtyBitmap* const> dirty);
  absl::StatusOr<RoundResult> AwaitRound();

  // Asks the destination for a digest of every page and compares it with
  // this side's memory (SessionOptions::verify says which digests), which
  // must not change meanwhile.
  absl::StatusOr<VerifyReport> Verify();
  // Optional, once this side's memory no longer changes (the workload is
  // paused): starts hashing it on background threads that take only idle
  // CPU, so the hashing overlaps the final round and Verify has less left.
  absl::Status StartVerify();
  // Optional: this side's memory does not change from now on (the
  // workload is paused for good, or there is none), until Finish. Every
  // packet sent after it is then sealed (SessionOptions::protect mac)
  // where its pages are, without a staging copy, since nothing can change
  // them between the tag and the send; and with VerifyMode::kFull each
  // page's digest is taken as it is sent, in the same pass, so Verify
  // reads again only the pages last sent before this call. A page changed
  // all the same fails its tag at the destination, which ends the session,
  // unless it changed after it went: Verify then compares what was sent,
  // not what memory holds. A write the dirty tracking missed before this
  // call is still found: the page is not sent again, so it is read again.
  void NoteMemoryFrozen();

  // Ends the session: every channel sends FINISH and the destination
  // confirms. With streams, only once every one ended (AwaitStreams). Calling
  // Finish after an error returns that error.
  //
  // The commit point is the control FINISH: once it has left
  // (finish_sent()), the destination may have taken the memory over and
  // run it before its confirmation was lost, so a failure from then on
  // leaves the outcome unknown, and the caller must not let its own copy
  // of the workload run on (two live copies); its status says so. Before
  // it, a failure means the destination did not commit. So does the
  // destination's own refusal of FINISH (its ERROR before FINISH_ACK: it
  // sends none once it committed): the status then says "not committed"
  // and the destination's cause. commit_outcome() tells the three apart.
  absl::Status Finish();
  // Whether Finish sent the control FINISH (the commit point). Any thread.
  bool finish_sent() const;
  // Where the destination stands on the commit point (CommitOutcome):
  // kPending until Finish returned, post-copy armed or the session failed.
  // Any thread.
  CommitOutcome commit_outcome() const;

  // ---- post-copy (SessionOptions::postcopy) ----
  // The switch. `missing` (one bitmap per region) marks every page the
  // destination does not hold: pages never sent, and pages written since
  // their last send (the dirty bits the last round did not take). The
  // caller's workload must be stopped for good before this: from here on
  // this side's memory is where every page the destination still lacks
  // comes from, and it must not change. Awaits every started round, sends
  // the set as ranges, and returns once the destination dropped those
  // pages and armed its fault handling: the workload may resume there.
  // The bitmaps are read, not changed. The switch is the commit point:
  // once MISSING_PAGES left, a failure leaves the outcome unknown, unless
  // the destination refused the switch with its own ERROR before arming
  // (commit_outcome() kNotCommitted: this side's workload may resume).
  absl::Status StartPostcopy(absl::Span<DirtyBitmap* const> missing);
  // After StartPostcopy: answers the destination's page requests first
  // and pushes every other missing page on the bulk channels, restarting
  // near the latest request (locality); returns once the destination
  // holds every page. Then Verify and Finish as after pre-copy. On error
  // the session is over and the destination holds only part of the
  // state: this side's memory is still whole, so keep it (the
  // destination's faulting threads stay blocked, not corrupted).
  absl::Status CompletePostcopy();
  // After StartPostcopy armed and the session then failed (CompletePostcopy
  // returned an error; this side's memory is still whole): a new session
  // that picks post-copy up where `cut` left it, if the destination still
  // waits (SessionOptions::postcopy_resume_timeout). It reconnects every
  // channel, learns from the destination which pages it still lacks, and
  // the destination asks again for the pages its threads wait on. Then
  // CompletePostcopy, Verify and Finish on the new Sender; `cut` can go.
  // `options` must name the same destination and key as `cut`'s.
  static absl::StatusOr<std::unique_ptr<Sender>> ResumePostcopy(
      const SessionOptions& options, absl::Span<const Region> regions,
      const Sender& cut);

  // ---- carried streams (SessionOptions::streams; docs/streams.md) ----
  // Carries the bytes of `fd`, a connected socket (one of the source
  // QEMU's migration connections), to a peer the destination connects for
  // it (Receiver::OnStreamOpen), and what that peer sends back to `fd`.
  // Takes `fd` (closed when the Sender goes, or at once on error). Opens
  // the stream on the destination first and returns its id once the
  // destination's peer is connected: call it in the order the peer's
  // connections came (QEMU takes its first as the main channel). The bytes
  // then flow on their own: stream s rides data channel s % channels, in
  // packets of up to 1 MiB read as they come, so the peer's own sends
  // block while the link is slow. The peer's end (EOF) is sent on as the
  // stream's end; an error reading it ends the session. Any thread; one
  // opening at a time.
  absl::StatusOr<uint32_t> CarryStream(int fd);
  // Waits until every stream carried so far ended both ways (its peer's
  // EOF went out, and the destination's peer closed its side): true, then
  // Finish; or until `deadline`: false, the streams go on. The session's
  // error once it failed (whatever its code: a stalled peer's is
  // DEADLINE_EXCEEDED too).
  absl::StatusOr<bool> AwaitStreams(absl::Time deadline);

  // Ends the session now from any thread; pending calls return `reason`.
  void Abort(const absl::Status& reason);

  // Caps the bytes per second all channels together send from now on
  // (SessionOptions::max_bandwidth); 0 lifts the cap. Any thread.
  void SetMaxBandwidth(uint64_t bytes_per_second);

  SessionStats stats() const;
  // Rounds the destination has confirmed (0 until the first).
  uint64_t confirmed_rounds() const;
  // Things the caller should know but that did not stop the session, such
  // as a transport fallback.
  std::vector<std::string> warnings() const;

 private:
  explicit Sender(std::unique_ptr<SenderImpl> impl);
  std::unique_ptr<SenderImpl> impl_;
};

}  // namespace ramferry

#endif  // RAMFERRY_SENDER_H_
