// The destination's admission of one session's connections: the control
// Hello opens the session and fixes its parameters, every data channel's
// Hello must match them, and each admitted connection waits in its slot
// until the Serve thread takes it.
//
// Admit and Deliver run on the socket listener's acceptor thread (and on a
// channel listener's, for a family that owns its connection set-up); the
// other calls run on the Serve thread.
#ifndef RAMFERRY_ENGINE_RECEIVER_ADMISSION_H_
#define RAMFERRY_ENGINE_RECEIVER_ADMISSION_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "channels/channel_factory.h"
#include "channels/socket_listener.h"
#include "channels/transport.h"
#include "channels/transport_family.h"
#include "engine/channel_receiver.h"
#include "engine/failure.h"
#include "engine/pages/held_pages.h"
#include "engine/pages/unauthentic_pages.h"
#include "engine/pages/zero_pages.h"
#include "engine/region_table.h"
#include "engine/verify.h"
#include "proto/handshake.h"
#include "proto/seal.h"
#include "ramferry/options.h"

namespace ramferry::engine {

// A connection's progress through admission.
enum class SlotState { kFree, kReserved, kLost, kReady, kTaken };

struct ChannelSlot {
  SlotState state = SlotState::kFree;
  std::unique_ptr<channels::Transport> transport;  // kReady
  std::optional<proto::SealKeys> keys;  // where its Hello proved the key
  std::string endpoint;  // kReady: the local address it arrived on, or ""
};

// The control connection is never reserved: its Hello opening the session
// is what admits it. kLost: admitted, then died before delivery.
struct ControlSlot {
  SlotState state = SlotState::kFree;
  int fd = -1;  // kReady: the socket, owned here until taken
  std::optional<proto::SealKeys> keys;
};

// The control connection, as the Serve thread takes it.
struct AdmittedControl {
  int fd = -1;
  std::optional<proto::SealKeys> keys;
  proto::SealMode seal = proto::SealMode::kNone;  // the session's
};

// What the receive threads start with, once every data channel arrived.
struct AdmittedChannels {
  std::vector<std::unique_ptr<channels::Transport>> transports;
  std::vector<std::optional<proto::SealKeys>> keys;  // one per transport
  std::vector<std::string> endpoints;  // one per transport (ChannelStats)
  proto::SealMode seal = proto::SealMode::kNone;
  ChannelReceiver::Config config;
  bool survive = false;
  // kFeaturePostcopy, and the urgent connection where the session has one
  // (kFeaturePostcopyUrgent): its socket (-1: none) and keys.
  bool postcopy = false;
  int urgent_fd = -1;
  bool streams = false;  // kFeatureStreams
  std::optional<proto::SealKeys> urgent_keys;
};

class Admission {
 public:
  // `options`, `table` and `failure` must outlive this.
  Admission(const SessionOptions& options, const RegionTable& table,
            const SessionFailure& failure)
      : options_(options), table_(table), failure_(failure) {}
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // Binds the socket listener.
  absl::Status Listen();
  uint16_t port() const { return tcp_listener_->port(); }
  // Starts the acceptor thread.
  void Start() { tcp_listener_->Start(); }
  // Stops the acceptor and closes what was admitted and never taken.
  void Stop();
  // Connections refused so far, and of those the ones that failed
  // authentication: the TCP listener's and the channel listener's.
  uint64_t refused() const;
  uint64_t auth_failures() const;
  // Wakes the Serve thread's waits: the session failed.
  void Wake();
  // Gives up the open session before its channels were taken (they are
  // closed) and admits a new control connection.
  void Reopen();
  // The session lost its connections in post-copy: admits only a source
  // that resumes it (a control Hello with its id and
  // kFeaturePostcopyResume), keeping what the session recorded (arrival
  // digests, zero pages). Reopen() ends that.
  void ReopenForResume();

  // The control connection, once delivered.
  // Waits until `deadline` (DeadlineExceeded) at most.
  absl::StatusOr<AdmittedControl> TakeControl(
      absl::Time deadline = absl::InfiniteFuture());
  // Waits until every data channel arrived (or was lost on the way).
  absl::Status AwaitChannels(absl::Time deadline);
  // Hands the arrived channels over, with the session's parameters.
  AdmittedChannels TakeChannels();
  // kFeatureArrivalDigests: a digest of every page as it landed, written by
  // the channel threads, read by AnswerVerify once they are done. Set at
  // admission, before the Serve thread takes the control connection.
  DigestTable* arrival_digests() const { return arrival_digests_.get(); }
  // Sealed sessions: the pages no tag vouched for yet (see
  // unauthentic_pages.h). Set at admission, like arrival_digests().
  const UnauthenticPages* unauthentic_pages() const {
    return unauthentic_.get();
  }

 private:
  proto::HelloReply Admit(const proto::Hello& hello);
  // What Admit would answer a data channel's Hello, taking nothing: a
  // keyed rdma channel's accept carries it before the peer proves the key,
  // and Admit claims the slot only once it has.
  proto::HelloReply Preview(const proto::Hello& hello);
  // Reopen and ReopenForResume.
  void ReopenAs(bool resume);
  // The control Hello opens the session; a data Hello joins it. Need mu_.
  proto::HelloReply AdmitControl(const proto::Hello& hello,
                                 const channels::TransportFamily& family);
  // AdmitControl's checks, which change nothing: whether a session may
  // start here now (none open, the resume as waited for, channels and
  // packet pages within this end's limits), the stream protection it
  // asks for (returned), and what the session needs of this end
  // (post-copy, pinned memory). Need mu_.
  absl::Status CheckSessionFits(const proto::Hello& hello) const;
  absl::StatusOr<proto::SealMode> CheckProtection(
      const proto::Hello& hello, const channels::TransportFamily& family) const;
  absl::Status CheckResources(const proto::Hello& hello,
                              const channels::TransportFamily& family) const;
  // The session as admitted: its parameters, the features granted and the
  // tables they need. Need mu_.
  absl::Status OpenSession(const proto::Hello& hello, proto::SealMode seal);
  // With `reserve`, the channel's slot is taken.
  proto::HelloReply AdmitData(const proto::Hello& hello, bool reserve = true);
  proto::HelloReply AdmitUrgent(const proto::Hello& hello);
  // Why this destination cannot run post-copy on `family` with its
  // regions, or OK.
  absl::Status CheckPostcopy(const channels::TransportFamily& family) const;
  // The session features this destination agrees to.
  uint64_t OfferedCapabilities() const;
  // A data channel arrived: for a socket family as the socket the
  // acceptor took (-1 if it was lost on the way), for a family that owns
  // its connection as the transport its listener made.
  void Deliver(const proto::Hello& hello, int fd, const proto::SealKeys* keys);
  // A family that owns its connection delivers the transport, or why
  // there is none: kUnauthenticated frees the channel's slot again (its
  // peer did not prove the key), anything else loses the channel.
  void DeliverTransport(
      const proto::Hello& hello,
      absl::StatusOr<std::unique_ptr<channels::Transport>> transport);
  // Either way, the channel's slot gets its transport (`fd`: the socket
  // under it, or -1); a transport of no slot here is closed. Needs mu_.
  void PlaceLocked(const proto::Hello& hello,
                   std::unique_ptr<channels::Transport> transport, int fd,
                   const proto::SealKeys* keys);
  // An admitted channel died before delivery: AwaitChannels reports it at
  // once rather than waiting out the handshake window. Needs mu_.
  void LoseLocked(const proto::Hello& hello);
  // The slot of `hello`'s channel in the open session; null for a Hello of
  // another session or past its channel count. Needs mu_.
  ChannelSlot* SlotLocked(const proto::Hello& hello);
  channels::TransportOptions ChannelOptions() const;  // needs mu_
  // Where the session's transport owns its connection set-up, its own
  // listener admits the data channels; it is started between admitting the
  // control Hello and replying to it, without mu_ (its admission takes
  // mu_). Refuses the session where it cannot start.
  proto::HelloReply StartChannelListener(std::unique_lock<std::mutex>& lock,
                                         TransportKind kind,
                                         proto::HelloReply accepted);
  void CloseUndelivered();

  const SessionOptions& options_;
  const RegionTable& table_;
  const SessionFailure& failure_;
  std::unique_ptr<channels::SocketListener> tcp_listener_;

  // Shared with the acceptor thread.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  bool session_open_ = false;
  proto::SessionId session_;
  uint32_t channel_count_ = 0;
  uint32_t packet_pages_ = 0;
  uint64_t capabilities_ = 0;
  std::unique_ptr<DigestTable> arrival_digests_;
  // kFeatureZeroPages: how zero pages are applied to the regions.
  std::unique_ptr<ZeroPages> zero_pages_;
  std::unique_ptr<HeldPages> held_;  // kFeatureDeltaPages
  std::unique_ptr<UnauthenticPages> unauthentic_;
  uint16_t transport_ = 0;
  uint64_t rdma_chunk_bytes_ = 0;
  bool survive_ = false;
  bool resuming_ = false;  // ReopenForResume
  proto::SealMode seal_ = proto::SealMode::kNone;
  ControlSlot control_;
  // The urgent connection (kFeaturePostcopyUrgent), admitted like the
  // control connection; kFree until its Hello, kTaken when not expected.
  ControlSlot urgent_;
  std::vector<ChannelSlot> slots_;
  std::unique_ptr<channels::ChannelListener> channel_listener_;
  // What the channel listeners of sessions given up (Reopen) counted.
  uint64_t retired_refused_ = 0;
  uint64_t retired_auth_failures_ = 0;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_RECEIVER_ADMISSION_H_
