// ReceiverImpl, the object behind ramferry::Receiver, declared here so its
// members can be defined over several files: receiver.cc (the session),
// receiver_verify.cc (answering VERIFY_REQUEST) and
// receiver_channel_loss.cc (surviving channel loss). Admission of the
// connections is engine::Admission's (receiver_admission.h).
#ifndef RAMFERRY_ENGINE_RECEIVER_IMPL_H_
#define RAMFERRY_ENGINE_RECEIVER_IMPL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/channel_receiver.h"
#include "engine/control.h"
#include "engine/failure.h"
#include "engine/heartbeat.h"
#include "engine/postcopy/postcopy_target.h"
#include "engine/receiver_admission.h"
#include "engine/region_table.h"
#include "engine/round_barrier.h"
#include "engine/stream/stream_peers.h"
#include "ramferry/options.h"
#include "ramferry/region.h"
#include "ramferry/stats.h"

namespace ramferry {

class ReceiverImpl {
 public:
  ReceiverImpl(const SessionOptions& options, absl::Span<const Region> regions)
      : options_(options),
        table_(regions),
        failure_([this](const absl::Status& s, engine::Origin o) {
          OnFailure(s, o);
        }),
        admission_(options_, table_, failure_) {}

  ~ReceiverImpl() { admission_.Stop(); }

  absl::Status Listen();
  uint16_t port() const { return admission_.port(); }
  absl::Status Serve();
  void Abort(const absl::Status& reason) {
    aborted_.store(true);
    failure_.Fail(reason);
    admission_.Wake();
  }
  SessionStats stats() const;
  uint64_t applied_rounds() const { return applied_rounds_.load(); }
  uint64_t verified_pages() const { return verified_pages_.load(); }
  void OnPostcopyArmed(std::function<void()> armed) {
    on_postcopy_armed_ = std::move(armed);
  }
  void OnCommit(std::function<absl::Status()> commit) {
    on_commit_ = std::move(commit);
  }
  void OnStreamOpen(std::function<absl::StatusOr<int>(uint32_t)> open) {
    on_stream_open_ = std::move(open);
  }
  // The session's post-copy, once its channels started with it; null
  // otherwise. Lives as long as this object.
  // Whether [first_page, first_page + pages) lies inside region
  // `region_id` (nothing is awaited without post-copy).
  bool HoldsRange(uint32_t region_id, uint64_t first_page,
                  uint64_t pages) const {
    const Region* r = table_.Find(region_id);
    return r != nullptr && first_page < r->page_count() && pages > 0 &&
           pages <= r->page_count() - first_page;
  }
  engine::PostcopyTarget* postcopy() const {
    std::lock_guard<std::mutex> lock(objects_mu_);
    return postcopy_.get();
  }
  engine::StreamPeers* stream_peers() const {
    std::lock_guard<std::mutex> lock(objects_mu_);
    return streams_.get();
  }

 private:
  absl::Status ServeSession();
  // Takes a control connection (waiting until `deadline`) and brings its
  // session up to the point where its channels start; a failure here
  // leaves nothing behind.
  absl::Status OpenSession(absl::Time deadline = absl::InfiniteFuture());
  // Closes a session OpenSession gave up on and waits for another (one
  // that resumes post-copy, while a resume is awaited).
  void AbandonSession(const absl::Status& why);
  // The session's end, whichever way: its channels, its control
  // connection and the post-copy threads stop. Returns how it ended.
  absl::Status EndSession(const absl::Status& served);
  // Post-copy was cut short by `cause`: waits (postcopy_resume_timeout)
  // for the source to resume it and serves the resumed session; the
  // status it ends with, or `cause` if no source came.
  absl::Status ResumeSession(const absl::Status& cause);
  absl::Status NegotiateRegions(absl::Time deadline);
  absl::Status StartChannels();
  // kFeaturePostcopy: the post-copy target, with the urgent connection
  // (`urgent_fd`, -1: none) sealed like the control connection. Needs
  // objects_mu_.
  absl::Status MakePostcopyLocked(engine::AdmittedChannels& admitted);
  absl::Status ControlLoop();
  // One control message: nullopt to go on, or the status the session ends
  // with.
  std::optional<absl::Status> Dispatch(
      const engine::ControlChannel::Message& message);
  absl::Status OnFinish(const engine::ControlChannel::Message& message);
  absl::Status OnPeerError(absl::Span<const uint8_t> payload);
  absl::Status AwaitFinished();
  // The destination's commit point, right before FINISH_ACK: false if the
  // session failed first (its ERROR then tells the source this side did
  // not commit); else committed_ is set, and no ERROR goes out from then
  // on.
  bool Commit();
  // MISSING_PAGES: post-copy's switch, where the commit hook runs (once,
  // at the first) and the last one arms.
  absl::Status OnMissingPages(engine::PostcopyTarget& postcopy,
                              absl::Span<const uint8_t> payload);
  // PostcopyTarget's arm gate: as Commit(), right before POSTCOPY_ARMED;
  // sets arming_ until it went.
  absl::Status ArmGate();
  // A sealed session's pages that no tag vouched for (unauthentic_pages.h)
  // hold it back from what `when` says.
  absl::Status CheckAuthentic(absl::string_view when) const;
  absl::Status AnswerVerify(absl::Span<const uint8_t> payload);
  // Surviving channel loss: a receive thread stopped short of FINISH.
  void OnChannelError(const engine::ChannelReceiver::Error& error);
  // CHANNEL_GONE: stops the channel and the round barrier's wait for it.
  absl::Status RemoveChannel(absl::Span<const uint8_t> payload);
  bool ChannelGone(uint32_t channel);
  // The source declared it gone (kRemoving or kRemoved).
  bool ChannelRemoved(uint32_t channel);
  ChannelLoss* FindLossLocked(uint32_t channel);  // needs loss_mu_
  void OnFailure(const absl::Status& status, engine::Origin origin);

  const SessionOptions options_;
  const engine::RegionTable table_;
  engine::SessionFailure failure_;
  bool served_ = false;
  bool surviving_ = false;  // Serve thread: the session survives losses

  // The session's connections until the Serve thread takes them, and the
  // parameters the control Hello fixed.
  engine::Admission admission_;

  // Session objects; teardown (any thread) and stats() take objects_mu_.
  mutable std::mutex objects_mu_;
  std::unique_ptr<engine::ControlChannel> control_;
  std::unique_ptr<engine::HeartbeatSender> heartbeat_;  // Serve thread only
  std::unique_ptr<engine::RoundBarrier> barrier_;
  std::vector<std::unique_ptr<engine::ChannelReceiver>> channels_;
  std::unique_ptr<engine::PostcopyTarget> postcopy_;
  std::function<void()> on_postcopy_armed_;  // set before Serve
  std::function<absl::Status()> on_commit_;  // set before Serve
  // SessionOptions::streams: connects each stream's peer (set before
  // Serve), and the session's streams once its channels started.
  std::function<absl::StatusOr<int>(uint32_t)> on_stream_open_;
  std::unique_ptr<engine::StreamPeers> streams_;
  // A resumed session's urgent connection, until Reattach takes it.
  std::unique_ptr<engine::ControlChannel> resumed_urgent_;
  bool resuming_ = false;             // Serve thread
  std::atomic<bool> aborted_{false};  // Abort() was called
  // Commit() passed: Serve returns OK and no ERROR is sent. Written under
  // objects_mu_, where OnFailure reads it.
  std::atomic<bool> committed_{false};
  // ArmGate() passed and POSTCOPY_ARMED is not known to be out: no ERROR
  // goes meanwhile. Written under objects_mu_.
  std::atomic<bool> arming_{false};
  // The commit hook ran (at post-copy's switch, or at FINISH). Serve
  // thread.
  bool commit_asked_ = false;
  // The local address each channel arrived on (ChannelStats::endpoint).
  std::vector<std::string> endpoints_;
  std::atomic<uint64_t> applied_rounds_{0};
  uint64_t sessions_abandoned_ = 0;  // guarded by objects_mu_
  std::string last_abandoned_;       // guarded by objects_mu_
  std::atomic<uint64_t> verified_pages_{0};

  // Surviving channel loss: each channel's state, and the losses.
  enum class ChannelState { kLive, kLostHere, kRemoving, kRemoved };
  mutable std::mutex loss_mu_;
  // Guarded by loss_mu_.
  std::vector<ChannelState> channel_state_;
  std::vector<ChannelLoss> losses_;
};

}  // namespace ramferry

#endif  // RAMFERRY_ENGINE_RECEIVER_IMPL_H_
