#include "channels/rdma_connection.h"

#include <errno.h>
#include <poll.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "channels/socket_io.h"
#include "channels/transport_family.h"

namespace ramferry::channels {

absl::Status RdmaErrno(absl::string_view what) {
  return ErrnoStatus(errno, what);
}

Connection::~Connection() {
  if (id != nullptr && connected) rdma_disconnect(id);
  if (id != nullptr && id->qp != nullptr) rdma_destroy_qp(id);
  if (cq != nullptr) ibv_destroy_cq(cq);
  if (cc != nullptr) ibv_destroy_comp_channel(cc);
  domain.reset();  // the last channel's deallocates the PD
  if (id != nullptr) rdma_destroy_id(id);
  if (ec != nullptr) rdma_destroy_event_channel(ec);
}

absl::Status Connection::CreateQp(const RdmaConfig& config,
                                  const proto::SessionId& session,
                                  RdmaDomain::End end) {
  absl::StatusOr<std::shared_ptr<RdmaDomain>> d =
      RdmaDomain::ForSession(id->verbs, session, end);
  if (!d.ok()) return d.status();
  domain = *std::move(d);
  pd = domain->pd();
  cc = ibv_create_comp_channel(id->verbs);
  if (cc == nullptr) return RdmaErrno("ibv_create_comp_channel");
  const int cqe = static_cast<int>(config.send_queue + config.recv_queue + 16);
  cq = ibv_create_cq(id->verbs, cqe, nullptr, cc, 0);
  if (cq == nullptr) return RdmaErrno("ibv_create_cq");
  ibv_qp_init_attr attr{};
  attr.send_cq = cq;
  attr.recv_cq = cq;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 0;  // only the last WR of each post is signalled
  attr.cap.max_send_wr = config.send_queue;
  attr.cap.max_recv_wr = config.recv_queue;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  // A provider refuses (EINVAL) more inline room than it has rather than
  // granting less: ask again for half as much, down to none.
  attr.cap.max_inline_data = config.max_inline;
  while (rdma_create_qp(id, pd, &attr) != 0) {
    if (errno != EINVAL || attr.cap.max_inline_data == 0) {
      return RdmaErrno(absl::StrFormat("rdma_create_qp (inline room %d)",
                                       attr.cap.max_inline_data));
    }
    attr.cap.max_inline_data /= 2;
  }
  // The provider may grant less inline room than asked, or none: what it
  // granted is the only size inline sends may use.
  ibv_qp_attr qa{};
  ibv_qp_init_attr qia{};
  max_inline = ibv_query_qp(id->qp, &qa, IBV_QP_CAP, &qia) == 0
                   ? qia.cap.max_inline_data
                   : attr.cap.max_inline_data;
  return absl::OkStatus();
}

absl::StatusOr<CmEvent> NextCmEvent(rdma_event_channel* ec,
                                    absl::Time deadline) {
  while (true) {
    // One poll even when the deadline has passed: a caller that knows an
    // event is there asks with a deadline of now.
    const int64_t ms =
        std::max<int64_t>(absl::ToInt64Milliseconds(deadline - absl::Now()), 0);
    pollfd p{ec->fd, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1000)));
    if (r < 0 && errno != EINTR) {
      return RdmaErrno("poll on the RDMA CM channel");
    }
    if (r <= 0) {
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            "timed out awaiting an RDMA CM event");
      }
      continue;
    }
    rdma_cm_event* ev;
    if (rdma_get_cm_event(ec, &ev) != 0) return RdmaErrno("rdma_get_cm_event");
    CmEvent out{ev->event, ev->status, ev->id, {}};
    const auto* pd = static_cast<const uint8_t*>(ev->param.conn.private_data);
    if (pd != nullptr) {
      out.private_data.assign(pd, pd + ev->param.conn.private_data_len);
    }
    rdma_ack_cm_event(ev);
    return out;
  }
}

absl::Status UnexpectedEvent(const CmEvent& ev, absl::string_view during) {
  return absl::UnavailableError(
      absl::StrFormat("%s: RDMA CM event %s (status %d)", during,
                      rdma_event_str(ev.type), ev.status));
}

namespace {

// Awaits the event `want` on `ec`; any other is an error `during`.
absl::Status AwaitEvent(rdma_event_channel* ec, rdma_cm_event_type want,
                        absl::Time deadline, absl::string_view during) {
  absl::StatusOr<CmEvent> ev = NextCmEvent(ec, deadline);
  if (!ev.ok()) return ev.status();
  if (ev->type != want) return UnexpectedEvent(*ev, during);
  return absl::OkStatus();
}

// Both ends retry as often as the CM allows; receiver not ready: forever.
rdma_conn_param ConnParam(const uint8_t* private_data, uint8_t bytes) {
  rdma_conn_param param{};
  param.private_data = private_data;
  param.private_data_len = bytes;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  return param;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Connection>> ResolveRoute(
    const std::string& host, uint16_t port, absl::Duration timeout,
    absl::Time deadline, absl::string_view where) {
  auto conn = std::make_unique<Connection>();
  conn->ec = rdma_create_event_channel();
  if (conn->ec == nullptr) return RdmaErrno("rdma_create_event_channel");
  if (rdma_create_id(conn->ec, &conn->id, nullptr, RDMA_PS_TCP) != 0) {
    return RdmaErrno("rdma_create_id");
  }
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  if (rdma_getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints,
                       &res) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": cannot resolve ", host));
  }
  const int ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
  int r = rdma_resolve_addr(conn->id, nullptr, res->ai_dst_addr, ms);
  rdma_freeaddrinfo(res);
  if (r != 0) return RdmaErrno(absl::StrCat(where, ": rdma_resolve_addr"));
  if (absl::Status s = AwaitEvent(
          conn->ec, RDMA_CM_EVENT_ADDR_RESOLVED, deadline,
          absl::StrCat(where,
                       ": resolving the address (no RDMA device has a route "
                       "to it?)"));
      !s.ok()) {
    return s;
  }
  if (rdma_resolve_route(conn->id, ms) != 0) {
    return RdmaErrno(absl::StrCat(where, ": rdma_resolve_route"));
  }
  if (absl::Status s =
          AwaitEvent(conn->ec, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline,
                     absl::StrCat(where, ": resolving the route"));
      !s.ok()) {
    return s;
  }
  return conn;
}

absl::StatusOr<proto::HelloReply> ConnectWithHello(Connection& conn,
                                                   const proto::Hello& hello,
                                                   absl::Time deadline,
                                                   absl::string_view where) {
  uint8_t hello_bytes[proto::kHelloBytes];
  proto::EncodeHello(hello, absl::MakeSpan(hello_bytes));
  rdma_conn_param param = ConnParam(hello_bytes, sizeof hello_bytes);
  if (rdma_connect(conn.id, &param) != 0) {
    return RdmaErrno(absl::StrCat(where, ": rdma_connect"));
  }
  absl::StatusOr<CmEvent> ev = NextCmEvent(conn.ec, deadline);
  if (!ev.ok()) return ev.status();
  if (ev->type == RDMA_CM_EVENT_REJECTED &&
      ev->private_data.size() >= proto::kHelloReplyBytes) {
    absl::StatusOr<proto::HelloReply> refused =
        proto::DecodeHelloReply(ev->private_data);
    if (refused.ok()) return proto::HelloReplyStatus(*refused);
  }
  if (ev->type != RDMA_CM_EVENT_ESTABLISHED) {
    return UnexpectedEvent(*ev, where);
  }
  conn.connected = true;
  return proto::DecodeHelloReply(ev->private_data);
}

RdmaListener::Impl::Impl(const TransportOptions& options,
                         const RdmaConfig& config, Admit admit, Deliver deliver,
                         MakeTransport make)
    : options_(options),
      config_(config),
      admit_(std::move(admit)),
      deliver_(std::move(deliver)),
      make_(std::move(make)) {}

RdmaListener::Impl::~Impl() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  pending_.clear();
  if (listen_id_ != nullptr) rdma_destroy_id(listen_id_);
  if (ec_ != nullptr) rdma_destroy_event_channel(ec_);
}

absl::Status RdmaListener::Impl::Listen(const std::string& host,
                                        uint16_t port) {
  if (absl::Status s = ProbeRdma(); !s.ok()) return s;
  ec_ = rdma_create_event_channel();
  if (ec_ == nullptr) return RdmaErrno("rdma_create_event_channel");
  if (rdma_create_id(ec_, &listen_id_, nullptr, RDMA_PS_TCP) != 0) {
    return RdmaErrno("rdma_create_id");
  }
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  if (rdma_getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints,
                       &res) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve RDMA listen address ", host));
  }
  int r = rdma_bind_addr(listen_id_, res->ai_src_addr);
  rdma_freeaddrinfo(res);
  if (r != 0 || rdma_listen(listen_id_, 64) != 0) {
    return RdmaErrno(absl::StrFormat("RDMA listen on %s:%d", host, port));
  }
  port_ = ntohs(rdma_get_src_port(listen_id_));
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void RdmaListener::Impl::Run() {
  while (!stop_.load()) {
    pollfd p{ec_->fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    rdma_cm_event* ev;
    if (rdma_get_cm_event(ec_, &ev) != 0) continue;
    rdma_cm_id* id = ev->id;
    switch (ev->event) {
      case RDMA_CM_EVENT_CONNECT_REQUEST:
        OnConnectRequest(ev);  // acks the event
        break;
      case RDMA_CM_EVENT_ESTABLISHED: {
        rdma_ack_cm_event(ev);
        auto it = pending_.find(id);
        if (it == pending_.end()) break;
        Pending done = std::move(it->second);
        pending_.erase(it);
        done.conn->connected = true;
        // From now on the connection's events (a disconnect) go to its
        // own channel, where the transport watches for them.
        if (rdma_migrate_id(id, done.conn->ec) != 0) done.transport.reset();
        deliver_(done.hello, std::move(done.transport));
        break;
      }
      default: {  // rejected, unreachable, disconnected before delivery
        rdma_ack_cm_event(ev);
        auto it = pending_.find(id);
        if (it == pending_.end()) break;
        const proto::Hello hello = it->second.hello;
        pending_.erase(it);
        deliver_(hello, nullptr);
        break;
      }
    }
  }
}

void RdmaListener::Impl::OnConnectRequest(rdma_cm_event* ev) {
  rdma_cm_id* id = ev->id;
  proto::HelloReply reply;
  proto::Hello hello;
  absl::StatusOr<proto::Hello> decoded = DecodeChannelHello(
      {static_cast<const uint8_t*>(ev->param.conn.private_data),
       ev->param.conn.private_data_len});
  if (!decoded.ok()) {
    reply.status = static_cast<uint16_t>(decoded.status().code());
    reply.reason = std::string(decoded.status().message());
  } else {
    hello = *decoded;
    reply = admit_(hello);
  }
  uint8_t reply_bytes[proto::kHelloReplyBytes];
  proto::EncodeHelloReply(reply, absl::MakeSpan(reply_bytes));
  rdma_ack_cm_event(ev);
  if (!reply.accepted()) {
    rdma_reject(id, reply_bytes, sizeof reply_bytes);
    rdma_destroy_id(id);
    return;
  }
  auto conn = std::make_unique<Connection>();
  conn->id = id;
  conn->ec = rdma_create_event_channel();
  RdmaConfig config = config_;
  config.capabilities = reply.capabilities;
  absl::Status s = conn->ec == nullptr
                       ? RdmaErrno("rdma_create_event_channel")
                       : conn->CreateQp(config, hello.session,
                                        RdmaDomain::End::kDestination);
  // Admitted, so whatever fails from here is delivered as a lost channel:
  // its slot must not stay reserved for a connection that never comes.
  if (!s.ok()) {
    rdma_reject(id, nullptr, 0);
    deliver_(hello, nullptr);
    return;  // conn's destructor destroys the id
  }
  Connection* c = conn.get();
  std::unique_ptr<Transport> transport;
  if (!make_(std::move(conn), options_, config, &transport).ok()) {
    rdma_reject(id, nullptr, 0);
    deliver_(hello, nullptr);
    return;
  }
  rdma_conn_param param = ConnParam(reply_bytes, sizeof reply_bytes);
  if (rdma_accept(id, &param) != 0) {
    deliver_(hello, nullptr);
    return;
  }
  pending_[id] = {std::move(transport), c, hello};
}

}  // namespace ramferry::channels
