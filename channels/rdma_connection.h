// rdma_connection: the verbs and rdmacm objects of one RDMA channel and
// the CM steps that make them: on the source resolving the route, creating
// the QP and connecting with the Hello as private data; on the destination
// the listener that admits connection requests.
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
#include "channels/rdma.h"
#include "channels/rdma_domain.h"
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
  uint32_t max_inline = 0;  // what the QP granted
  // Cleared by the channel thread on the peer's disconnect, read by
  // Shutdown from any thread.
  std::atomic<bool> connected{false};

  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // The CQ on its completion channel, and the RC QP on `id` in the
  // session's domain (of `session` and `end`, on id's device).
  absl::Status CreateQp(const RdmaConfig& config,
                        const proto::SessionId& session, RdmaDomain::End end);
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
// connects with `hello` as private data. Returns the HelloReply the
// destination accepted with, or the status of its refusal.
absl::StatusOr<proto::HelloReply> ConnectWithHello(Connection& conn,
                                                   const proto::Hello& hello,
                                                   absl::Time deadline,
                                                   absl::string_view where);

class RdmaListener::Impl {
 public:
  // Makes the destination's transport of a connection to accept, the QP
  // created, and posts its receives. *transport is set even when that
  // fails: it owns the id, which must outlive the rejection.
  using MakeTransport = std::function<absl::Status(
      std::unique_ptr<Connection>, const TransportOptions&, const RdmaConfig&,
      std::unique_ptr<Transport>* transport)>;

  Impl(const TransportOptions& options, const RdmaConfig& config, Admit admit,
       Deliver deliver, MakeTransport make);
  ~Impl();

  absl::Status Listen(const std::string& host, uint16_t port);
  uint16_t port() const { return port_; }

 private:
  struct Pending {
    std::unique_ptr<Transport> transport;
    Connection* conn;  // the transport's
    proto::Hello hello;
  };

  void Run();
  void OnConnectRequest(rdma_cm_event* ev);

  const TransportOptions options_;
  const RdmaConfig config_;
  const Admit admit_;
  const Deliver deliver_;
  const MakeTransport make_;
  rdma_event_channel* ec_ = nullptr;
  rdma_cm_id* listen_id_ = nullptr;
  uint16_t port_ = 0;
  std::map<rdma_cm_id*, Pending> pending_;  // listener thread only
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_RDMA_CONNECTION_H_
