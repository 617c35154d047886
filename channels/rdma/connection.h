// rdma_connection: the verbs and rdmacm objects of one RDMA channel and
// the CM steps that make them: on the source resolving the route, creating
// the QP and connecting with the Hello as private data; on the destination
// the listener that admits connection requests and, with a key, delivers a
// channel only once the source's proof checked out (rdma/auth.h).
#ifndef RAMFERRY_CHANNELS_RDMA_CONNECTION_H_
#define RAMFERRY_CHANNELS_RDMA_CONNECTION_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "channels/rdma/auth.h"
#include "channels/rdma/domain.h"
#include "channels/rdma/rdma.h"
#include "channels/transport.h"
#include "proto/handshake.h"

namespace ramferry::channels {

// The status for a failed verbs or rdmacm call, from errno.
absl::Status RdmaErrno(absl::string_view what);

// The verbs and rdmacm objects of one connection, released in order.
struct Connection {
  rdma_event_channel* ec = nullptr;  // this connection's own events
  rdma_cm_id* id = nullptr;
  // The session's protection domain on this end, shared with its other
  // channels; `pd` is the domain's, not this connection's.
  std::shared_ptr<RdmaDomain> domain;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* cc = nullptr;
  ibv_cq* cq = nullptr;
  // The RC QP: rdmacm's (id->qp), or with `owns_qp` this connection's
  // own, which rdmacm never sees, so that only this code sets its access
  // flags (rdma_accept re-runs the INIT transition with REMOTE_WRITE).
  ibv_qp* qp = nullptr;
  bool owns_qp = false;
  uint32_t max_inline = 0;  // what the QP granted
  // Cleared by the channel thread on the peer's disconnect, read by
  // Shutdown from any thread.
  std::atomic<bool> connected{false};

  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // The CQ on its completion channel, and the RC QP in the session's
  // domain (of `session` and `end`, on id's device): on `id` (rdmacm's),
  // or with `own` this connection's (ReadyPassive takes it to RTS).
  absl::Status CreateQp(const RdmaConfig& config,
                        const proto::SessionId& session, RdmaDomain::End end,
                        bool own = false);

  // The passive end's own QP, from RESET to RTS with the attributes
  // rdmacm derives from the connect request, taking the peer's RDMA
  // WRITEs only with `remote_write` (never READs or atomics: nothing here
  // asks for them); before rdma_accept, which then names it by number.
  absl::Status ReadyPassive(bool remote_write);

  // Whether the established QP takes the peer's RDMA WRITEs. A keyed
  // destination readies its QP without them and opens it to WRITEs once
  // the source's proof checked out.
  absl::Status AllowRemoteWrite(bool allow);
  // Ends the peer's access for good: the QP goes to error, so nothing the
  // peer sends lands any more and posted work flushes. From any thread,
  // any number of times.
  void RevokeRemoteAccess();
};

struct CmEvent {
  rdma_cm_event_type type;
  int status = 0;
  rdma_cm_id* id = nullptr;
  std::vector<uint8_t> private_data;
};

// The next event on `ec`, acknowledged and copied, or a timeout.
absl::StatusOr<CmEvent> NextCmEvent(rdma_event_channel* ec,
                                    absl::Time deadline);
absl::Status UnexpectedEvent(const CmEvent& ev, absl::string_view during);

// Source, the first step: an id on its own event channel with a route to
// host:port, by `deadline`. `where` names the connection in errors.
absl::StatusOr<std::unique_ptr<Connection>> ResolveRoute(
    const std::string& host, uint16_t port, absl::Duration timeout,
    absl::Time deadline, absl::string_view where);

// Source, the last step (after CreateQp and the receives are posted):
// connects with `hello` (its wire bytes) as private data. Returns what the
// destination accepted with (its reply, and its challenge where it sent
// one), or the status of its refusal.
absl::StatusOr<RdmaAccept> ConnectWithHello(Connection& conn,
                                            absl::Span<const uint8_t> hello,
                                            absl::Time deadline,
                                            absl::string_view where);

// What the listener asks of a destination transport it holds until it is
// delivered: with a key, the source's proof comes through it first.
class SourceProofReader {
 public:
  // Without blocking: takes the source's first message off the QP and
  // checks that it is the proof `expected` (CheckSourceProof). false:
  // nothing has arrived yet. true: it checked out, and its receive is
  // posted again. An error: it did not (kUnauthenticated), or the QP
  // failed.
  virtual absl::StatusOr<bool> TakeSourceProof(
      const proto::AuthMac& expected) = 0;

 protected:
  ~SourceProofReader() = default;
};

// A destination transport made for a connection request, and its proof
// reader (the same object).
struct AcceptedTransport {
  std::unique_ptr<Transport> transport;
  SourceProofReader* proof = nullptr;
};

class RdmaListener::Impl {
 public:
  // Makes the destination's transport of a connection to accept, the QP
  // created, and posts its receives. *made is set even when that fails:
  // its transport owns the id, which must outlive the rejection.
  using MakeTransport = std::function<absl::Status(
      std::unique_ptr<Connection>, const TransportOptions&, const RdmaConfig&,
      AcceptedTransport* made)>;

  // `key`: the pre-shared key every source must prove (empty: none).
  Impl(const TransportOptions& options, const RdmaConfig& config,
       std::string key, Admit admit, Deliver deliver, Admit preview,
       MakeTransport make);
  ~Impl();

  absl::Status Listen(const std::string& host, uint16_t port);
  uint16_t port() const { return port_; }
  uint64_t refused() const { return refused_.load(); }
  uint64_t auth_failures() const { return auth_failures_.load(); }

 private:
  struct Pending {
    AcceptedTransport accepted;
    Connection* conn;  // the transport's
    proto::Hello hello;
    // Keyed: the proof the source must send first, and, once established,
    // until when it may take to arrive.
    proto::AuthMac expected{};
    bool proving = false;
    absl::Time proof_deadline = absl::InfiniteFuture();
    // Admitted (its slot taken, so it is delivered once, whatever comes);
    // otherwise only previewed, admitted once its proof checks out.
    bool admitted = true;
  };

  void Run();
  void OnCmEvent(rdma_cm_event* ev);
  void OnConnectRequest(rdma_cm_event* ev);
  // Rejects a connection request with `reply` (the refusal's reason) and
  // destroys its id.
  void Reject(rdma_cm_id* id, const proto::HelloReply& reply);
  // Established, and proven where a key asks for it: hands it over.
  void DeliverAccepted(rdma_cm_id* id);
  // Looks for the proof of every connection awaiting one; delivers those
  // that check out and fails the rest whose proof is wrong or late.
  void CheckProofs();
  // A connection that did not prove the key: counted, its QP revoked, and
  // its Hello delivered with `why` so its slot is free again.
  void FailProof(std::map<rdma_cm_id*, Pending>::iterator it,
                 const absl::Status& why);
  // A request that will not become a channel: an admitted one is
  // delivered with `why`; one only previewed was never the session's, and
  // is counted as refused.
  void Drop(const proto::Hello& hello, bool admitted, absl::Status why);

  const TransportOptions options_;
  const RdmaConfig config_;
  const std::string key_;
  const Admit admit_;
  const Deliver deliver_;
  const Admit preview_;  // may be null: admit at the request
  const MakeTransport make_;
  rdma_event_channel* ec_ = nullptr;
  rdma_cm_id* listen_id_ = nullptr;
  uint16_t port_ = 0;
  std::map<rdma_cm_id*, Pending> pending_;  // listener thread only
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> auth_failures_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_RDMA_CONNECTION_H_
