// SenderImpl, the object behind ramferry::Sender, declared here so its
// members can be defined over several files: sender.cc (rounds, Finish,
// the public Sender), sender_setup.cc (session set-up), sender_control.cc
// (the control thread, one handler per message), sender_channel_loss.cc
// (surviving channel loss) and sender_verify.cc (Verify).
#ifndef RAMFERRY_ENGINE_SENDER_IMPL_H_
#define RAMFERRY_ENGINE_SENDER_IMPL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "channels/transport.h"
#include "engine/channel_losses.h"
#include "engine/channel_sender.h"
#include "engine/command_ring.h"
#include "engine/control.h"
#include "engine/failure.h"
#include "engine/heartbeat.h"
#include "engine/postcopy/postcopy_source.h"
#include "engine/rate_limiter.h"
#include "engine/scheduler.h"
#include "engine/sent_ledger.h"
#include "engine/stream/carried_stream.h"
#include "engine/verify.h"
#include "proto/control.h"
#include "proto/handshake.h"
#include "proto/postcopy.h"
#include "proto/seal.h"
#include "ramferry/options.h"
#include "ramferry/region.h"
#include "ramferry/sender.h"
#include "ramferry/stats.h"

namespace ramferry {

class SenderImpl {
 public:
  SenderImpl(const SessionOptions& options, absl::Span<const Region> regions)
      : options_(options),
        regions_(regions),
        failure_([this](const absl::Status& s, engine::Origin o) {
          OnFailure(s, o);
        }) {}

  ~SenderImpl() {
    if (!finished_) Abort(absl::CancelledError("sender closed before Finish"));
    // Streams' readers push into the channels' rings, and the channels
    // send from the streams' backlogs: readers stop first, the channels
    // next, and the backlogs go last (streams_ is the last member).
    ShutdownStreams();
    for (auto& s : streams_.list) s->JoinReader();
    for (auto& c : channels_) c->Join();
    if (control_ != nullptr) control_->Shutdown();  // wakes a blocked beat
    if (heartbeat_ != nullptr) heartbeat_->Stop();
    if (control_thread_.joinable()) control_thread_.join();
    postcopy_.Stop();
  }

  absl::Status Setup();
  absl::StatusOr<RoundResult> SendRound(absl::Span<DirtyBitmap* const> dirty);
  // SendRound without its check that no started round is pending: also
  // how StartRound sends where rounds go one at a time.
  absl::StatusOr<RoundResult> RunRound(absl::Span<DirtyBitmap* const> dirty);
  // SessionOptions::delta, before connecting: the page size the cache will
  // be for (delta_page_size_), or none, with a warning for what goes whole
  // (or, with on, a refusal where nothing can take deltas).
  absl::Status PlanDeltas();
  // The cache of sent copies, where the session negotiated deltas.
  absl::Status CreateDeltaCache();
  absl::Status StartRound(absl::Span<DirtyBitmap* const> dirty);
  absl::StatusOr<RoundResult> AwaitRound();
  absl::Status StartVerify();
  void NoteMemoryFrozen() {
    memory_frozen_.store(true, std::memory_order_release);
  }
  absl::StatusOr<VerifyReport> Verify();
  absl::Status Finish();
  absl::Status StartPostcopy(absl::Span<DirtyBitmap* const> missing);
  absl::Status CompletePostcopy();
  absl::StatusOr<uint32_t> CarryStream(int fd);
  absl::StatusOr<bool> AwaitStreams(absl::Time deadline);
  // Before Setup: this session resumes `cut`'s post-copy.
  void ResumeFrom(const SenderImpl& cut);
  // After Setup of a resumed session: waits for the destination's
  // missing set and POSTCOPY_ARMED, and starts answering requests.
  absl::Status AwaitResumed();
  void Abort(const absl::Status& reason) { failure_.Fail(reason); }
  void SetMaxBandwidth(uint64_t bytes_per_second) {
    limiter_.SetRate(bytes_per_second);
  }
  SessionStats stats() const;
  std::vector<std::string> warnings() const { return terms_.warnings; }
  uint64_t confirmed_rounds() const {
    return events_.confirmed_mirror.load(std::memory_order_acquire);
  }
  bool finish_sent() const {
    return finish_sent_.load(std::memory_order_acquire);
  }
  CommitOutcome commit_outcome() const;

 private:
  // Under events_.mu: the destination's ERROR came and no confirmation
  // (`confirmed`) before it, so it did not commit.
  bool RefusedBeforeConfirmed(bool confirmed) const;
  // The session failed with `cause` after the commit point `what` (FINISH,
  // or post-copy's switch) left: the destination's own refusal
  // (kNotCommitted) or no word from it (kUnknown), recorded in outcome_
  // and said in the status.
  absl::Status CommitFailed(const absl::Status& cause, const char* what);

  // ---- session set-up (sender_setup.cc) ----
  // Sends the control Hello; the reply fixes the session's features.
  absl::Status ExchangeControlHello(int fd, absl::Time deadline);
  // Sends the region table; the destination must accept it.
  absl::Status AgreeRegions(absl::Time deadline);
  absl::Status OpenChannels(absl::Time deadline);
  proto::Hello DataHello(uint32_t channel) const;
  engine::ChannelSender::Config ChannelConfig() const;
  // The rings' scheduler, the channel threads, the heartbeat and the
  // control thread.
  void StartThreads();
  uint64_t OfferedCapabilities() const;
  // One data channel, dialled the way its family connects, and its
  // sealer where the session is sealed.
  struct OpenedChannel {
    std::unique_ptr<channels::Transport> transport;
    std::unique_ptr<proto::Sealer> sealer;
    bool peer_on_this_host = false;  // ChannelSender::Config's
  };
  absl::StatusOr<OpenedChannel> OpenChannel(
      const proto::Hello& hello, const Endpoint& endpoint,
      const channels::TransportOptions& topts, absl::Time deadline);
  bool Has(uint32_t capability) const {
    return (terms_.transport_caps & capability) != 0;
  }
  // ---- the control thread (sender_control.cc) ----
  void ControlLoop();
  // The control connection failed or closed.
  void OnControlClosed(const absl::Status& cause);
  // One message from the destination; an error ends the session.
  absl::Status Dispatch(const engine::ControlChannel::Message& message);
  absl::Status OnRoundDone(absl::Span<const uint8_t> payload);
  absl::Status OnFinishAck(const engine::ControlChannel::Message& message);
  absl::Status OnVerifyResult(absl::Span<const uint8_t> payload);
  absl::Status OnChannelLost(const engine::ControlChannel::Message& message);
  absl::Status OnChannelGoneAck(absl::Span<const uint8_t> payload);
  absl::Status OnPeerError(absl::Span<const uint8_t> payload);

  void OnFailure(const absl::Status& status, engine::Origin origin);
  // The error to hand the caller once the session failed.
  absl::Status FinalStatus();
  // Pushes a barrier of `type` into every live ring and waits for all of
  // them (AwaitRings).
  absl::Status Barrier(engine::CommandType type, uint64_t round);
  // Waits until every live ring executed the last barrier pushed to it,
  // handling the losses that come up meanwhile.
  absl::Status AwaitRings();
  // Checks the destination applied as many pages as `round` sent.
  absl::Status CheckApplied(uint64_t round, uint64_t sent_pages);
  // Awaits every round StartRound left in flight (Verify, Finish).
  absl::Status AwaitStartedRounds();

  // ---- surviving channel loss (terms_.survive; caller thread;
  // sender_channel_loss.cc) ----
  // A channel died: from its own thread (a send failed) or the control
  // thread (the destination's CHANNEL_LOST). Queues it and stops the channel.
  void OnChannelLoss(uint32_t channel, const absl::Status& cause);
  // Declares every queued loss (DeclareGone), in order.
  absl::Status HandleLosses();
  // Stops channel `channel` here, tells the destination it is gone, and
  // once it confirms, re-sends the channel's batches of the open round on
  // the live channels, followed by one more SYNC on each.
  absl::Status DeclareGone(uint32_t channel, const absl::Status& cause);
  // Tells the destination channel `channel` is gone as of round
  // `declared`, and returns the round it went on without it.
  absl::StatusOr<uint64_t> AgreeGone(uint32_t channel, uint64_t declared,
                                     const absl::Status& cause);
  // Re-sends the gone channel's share of the open round and the one more
  // SYNC each live channel owes.
  absl::Status ResendShare(uint32_t channel, uint64_t effective);

  // ---- post-copy (sender_postcopy.cc; the rest is postcopy_'s) ----
  // kFeaturePostcopyUrgent: dials the urgent connection (set-up).
  absl::Status OpenUrgent(absl::Time deadline);
  // StartPostcopy's argument: one bitmap a region, of its size.
  absl::Status CheckMissingSets(absl::Span<DirtyBitmap* const> missing) const;
  // The urgent thread, whose failure after POSTCOPY_COMPLETE is none.
  void StartAnsweringRequests();
  // Waits for the destination's POSTCOPY_ARMED.
  absl::Status AwaitArmed(const char* what);

  // ---- carried streams (options_.streams; sender_streams.cc) ----
  // From the control thread: the destination's answers for the streams.
  absl::Status OnStreamOpened(absl::Span<const uint8_t> payload);
  absl::Status OnStreamBack(absl::Span<const uint8_t> payload);
  absl::Status OnStreamBackEnd(absl::Span<const uint8_t> payload);
  absl::Status OnStreamAck(absl::Span<const uint8_t> payload);
  // Surviving channel loss: the streams channel `lost` carried move to a
  // live channel, each resent from its last acknowledged offset.
  absl::Status ResendStreams(uint32_t lost);
  // Queues `command` on channel `channel`'s ring under its push lock;
  // false once the ring was aborted.
  bool PushStreamCommand(size_t channel, const engine::Command& command);
  // A stream's reader queues its chunk on the stream's channel.
  bool EnqueueStream(const engine::CarriedStream::Chunk& chunk);
  engine::CarriedStream* FindStream(uint32_t stream);
  // FindStream for a message `what` names: INVALID_ARGUMENT for a stream
  // never opened.
  absl::StatusOr<engine::CarriedStream*> OpenedStream(uint32_t stream,
                                                      const char* what);
  // Finish's check: every stream ended both ways; none opens from then.
  absl::Status CheckStreamsEnded();
  void ShutdownStreams();
  void AddStreamStats(SessionStats* stats) const;

  // ---- verification (sender_verify.cc) ----
  // Compares every page of `region` with the destination's digests.
  absl::Status VerifyRegion(const Region& region,
                            engine::BackgroundDigests* local_digests,
                            bool* hashed, VerifyReport* report);
  // Keeps the window of requests for `region` full.
  absl::Status RequestDigests(const Region& region, uint64_t* requested,
                              int* in_flight);
  // The next answer, which must be for pages [first_page, +count).
  absl::StatusOr<proto::VerifyResult> NextVerifyResult(const Region& region,
                                                       uint64_t first_page,
                                                       uint64_t count);

  // The first round's ranges that need not be read or sent (one list per
  // region; none where skip_untouched does not apply).
  std::vector<std::vector<proto::ZeroRange>> UntouchedRanges(uint64_t round);
  // Waits (for at most `timeout`) until `ready()` holds under events_.mu, the
  // session fails, or the control connection closes.
  template <typename Pred>
  absl::Status AwaitControl(Pred ready, absl::Duration timeout,
                            const std::string& what);

  const SessionOptions options_;
  const absl::Span<const Region> regions_;
  engine::SessionFailure failure_;
  // What set-up settles (ResumeFrom before it): written before any thread
  // of the session starts, read-only after, so every thread reads it
  // without a lock.
  struct Terms {
    proto::SessionId session;
    // A resumed session (ResumeFrom): the session it resumes.
    bool resume = false;
    proto::SessionId resumed_session;
    uint64_t features = 0;  // negotiated session features (proto::kCap*)
    // What the transport promises (channels::kCap*), and the kind its
    // channels run (options_.transport, or its fallback).
    uint32_t transport_caps = 0;
    TransportKind channel_kind = TransportKind::kTcp;
    // What guards the stream after each handshake (options_.protect,
    // resolved for the transport).
    proto::SealMode seal = proto::SealMode::kNone;
    // Surviving channel loss: both ends agreed to it.
    bool survive = false;
    // Where each channel went (engine::EndpointName), by channel.
    std::vector<std::string> endpoints;
    std::vector<std::string> warnings;
  };
  Terms terms_;
  std::unique_ptr<engine::ControlChannel> control_;
  std::vector<std::unique_ptr<engine::ChannelSender>> channels_;
  std::unique_ptr<engine::Scheduler> scheduler_;
  std::thread control_thread_;
  std::unique_ptr<engine::HeartbeatSender> heartbeat_;
  // Caller thread only.
  std::unique_ptr<engine::SentLedger> ledger_;  // terms_.survive
  // The channels lost, declared and acknowledged (terms_.survive only).
  engine::ChannelLosses losses_;
  // VerifyMode::kSent: what each page's last send carried.
  std::unique_ptr<engine::DigestTable> sent_digests_;
  // NoteMemoryFrozen was called; read by the channel threads per packet.
  std::atomic<bool> memory_frozen_{false};
  // VerifyMode::kFull: pages sent once memory_frozen_ (set during Setup).
  std::unique_ptr<engine::FrozenDigests> frozen_digests_;
  // kFeatureDeltaPages: the copies of the pages sent, for deltas, and
  // whether deltas may still go (not after post-copy's switch).
  uint32_t delta_page_size_ = 0;  // PlanDeltas: 0, no deltas
  std::unique_ptr<engine::DeltaCache> delta_cache_;
  std::atomic<bool> delta_allowed_{true};
  // Every channel's packets pass it (SessionOptions::max_bandwidth);
  // thread-safe, so handed out from const set-up code.
  mutable engine::RateLimiter limiter_{options_.max_bandwidth};
  // This side's memory, being hashed since StartVerify (kFull, kReread).
  std::unique_ptr<engine::BackgroundDigests> local_digests_;
  std::vector<uint32_t> last_seq_;  // per channel: last barrier pushed, or 0
  std::optional<uint64_t> open_round_;  // the round SendRound is sending
  bool finishing_ = false;
  uint64_t next_round_ = 0;  // caller thread only
  // StartRound's rounds not yet awaited, oldest first (caller thread);
  // in survive mode StartRound completes a round at once and keeps its
  // result here.
  struct StartedRound {
    uint64_t round, pages, bytes;
    absl::Time start;
    std::optional<RoundResult> done;
  };
  std::deque<StartedRound> started_;
  bool finished_ = false;  // caller thread only
  // The control FINISH may have left: the commit point (Sender::Finish).
  std::atomic<bool> finish_sent_{false};
  // FINISH, or post-copy's MISSING_PAGES, may have left: the commit point.
  std::atomic<bool> commit_sent_{false};
  // Where the destination stands on it, once known (commit_outcome()).
  std::atomic<CommitOutcome> outcome_{CommitOutcome::kPending};
  // Post-copy's source half: the sets, the urgent thread, the counters.
  engine::PostcopySource postcopy_{regions_};

  // What the destination said on the control connection: the control
  // thread writes it, the caller's thread waits for it (AwaitControl).
  // Guarded by mu; whatever may end a wait (an event, the session's
  // failure, a lost channel) notifies cv under mu.
  struct DestinationEvents {
    mutable std::mutex mu;
    std::condition_variable cv;
    uint64_t confirmed_rounds = 0;
    // Pages the destination applied in each confirmed round not yet
    // checked against what was sent, oldest first.
    std::deque<uint64_t> confirmed_pages;
    bool finish_acked = false;
    bool control_closed = false;
    std::optional<absl::Status> peer_error;
    std::deque<proto::VerifyResult> verify_results;
    // Post-copy: the destination armed / holds every page.
    bool postcopy_armed = false;
    bool postcopy_complete = false;
    // confirmed_rounds, for readers that take no lock (release/acquire).
    std::atomic<uint64_t> confirmed_mirror{0};

    // Wakes every waiter after a change outside these fields (a failure,
    // a lost channel or its acknowledgement): under mu, so a waiter that
    // checked before the change is already waiting.
    void Wake() {
      std::unique_lock<std::mutex> lock(mu);
      cv.notify_all();
    }
  };
  DestinationEvents events_;

  // Carried streams (options_.streams): in the order they opened, each
  // stream's index its id. The list only grows while the session lives,
  // so a pointer taken under mu stays valid.
  struct Streams {
    mutable std::mutex mu;
    std::vector<std::unique_ptr<engine::CarriedStream>> list;  // under mu
    bool closed = false;  // under mu: Finish began, no more streams
    // One opening at a time (CarryStream), in order.
    std::mutex open_mu;
    // STREAM_OPENED answers so far: under events_.mu.
    uint32_t opened = 0;
    // Several streams' readers may share a channel: each push into a ring
    // takes its channel's lock, so every ring keeps one producer at a time.
    std::vector<std::unique_ptr<std::mutex>> push_mu;
    // The channel each stream rides (its id % channels, until that channel
    // is lost): under route_mu; route_cv wakes a reader whose channel was
    // lost once its stream moved, or the session failed.
    mutable std::mutex route_mu;
    std::condition_variable route_cv;
    std::vector<uint32_t> route;
  };
  Streams streams_;
};

template <typename Pred>
absl::Status SenderImpl::AwaitControl(Pred ready, absl::Duration timeout,
                                      const std::string& what) {
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  bool timed_out = false;
  {
    std::unique_lock<std::mutex> lock(events_.mu);
    timed_out = !events_.cv.wait_until(lock, deadline, [&] {
      return ready() || failure_.failed() || events_.control_closed;
    });
    if (ready()) return absl::OkStatus();
  }
  if (timed_out) {
    failure_.Fail(absl::DeadlineExceededError(
        absl::StrFormat("%s: no answer from the destination within %s", what,
                        absl::FormatDuration(timeout))));
  } else if (!failure_.failed()) {
    failure_.Fail(absl::UnavailableError(
        absl::StrCat(what, ": control connection closed")));
  }
  return FinalStatus();
}

}  // namespace ramferry

#endif  // RAMFERRY_ENGINE_SENDER_IMPL_H_
