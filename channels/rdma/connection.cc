#include "channels/rdma/connection.h"

#include <errno.h>
#include <poll.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"
#include "base/status_macros.h"
#include "channels/transport_family.h"

namespace ramferry::channels {

absl::Status RdmaErrno(absl::string_view what) {
  return base::ErrnoStatus(errno, what);
}

Connection::~Connection() {
  if (id != nullptr && connected) rdma_disconnect(id);
  if (owns_qp && qp != nullptr) {
    ibv_destroy_qp(qp);
  } else if (id != nullptr && id->qp != nullptr) {
    rdma_destroy_qp(id);
  }
  if (cq != nullptr) ibv_destroy_cq(cq);
  if (cc != nullptr) ibv_destroy_comp_channel(cc);
  domain.reset();  // the last channel's deallocates the PD
  if (id != nullptr) rdma_destroy_id(id);
  if (ec != nullptr) rdma_destroy_event_channel(ec);
}

absl::Status Connection::CreateQp(const RdmaConfig& config,
                                  const proto::SessionId& session,
                                  RdmaDomain::End end, bool own) {
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
  owns_qp = own;
  auto create = [&] {
    if (own) {
      qp = ibv_create_qp(pd, &attr);
    } else if (rdma_create_qp(id, pd, &attr) == 0) {
      qp = id->qp;
    }
    return qp != nullptr;
  };
  while (!create()) {
    if (errno != EINVAL || attr.cap.max_inline_data == 0) {
      return RdmaErrno(absl::StrFormat("%s (inline room %d)",
                                       own ? "ibv_create_qp" : "rdma_create_qp",
                                       attr.cap.max_inline_data));
    }
    attr.cap.max_inline_data /= 2;
  }
  // The provider may grant less inline room than asked, or none: what it
  // granted is the only size inline sends may use.
  ibv_qp_attr qa{};
  ibv_qp_init_attr qia{};
  max_inline = ibv_query_qp(qp, &qa, IBV_QP_CAP, &qia) == 0
                   ? qia.cap.max_inline_data
                   : attr.cap.max_inline_data;
  return absl::OkStatus();
}

absl::Status Connection::ReadyPassive(bool remote_write) {
  for (const ibv_qp_state state : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    ibv_qp_attr attr{};
    int mask = 0;
    attr.qp_state = state;
    if (rdma_init_qp_attr(id, &attr, &mask) != 0) {
      return RdmaErrno("rdma_init_qp_attr");
    }
    // What rdma_accept would set, but for the access: no READs (this end
    // answers none: responder resources 0 in its accept) and WRITEs only
    // when asked.
    if (state == IBV_QPS_INIT) {
      attr.qp_access_flags = remote_write ? IBV_ACCESS_REMOTE_WRITE : 0;
    } else if (state == IBV_QPS_RTR) {
      attr.max_dest_rd_atomic = 0;
    } else {
      attr.max_rd_atomic = 0;
    }
    if (int r = ibv_modify_qp(qp, &attr, mask); r != 0) {
      return base::ErrnoStatus(r,
                               absl::StrFormat("ibv_modify_qp to %s",
                                               state == IBV_QPS_INIT  ? "INIT"
                                               : state == IBV_QPS_RTR ? "RTR"
                                                                      : "RTS"));
    }
  }
  return absl::OkStatus();
}

absl::Status Connection::AllowRemoteWrite(bool allow) {
  // RTS to RTS: the access flags are among what that transition may change
  // on an RC QP.
  ibv_qp_attr attr{};
  attr.qp_access_flags = allow ? IBV_ACCESS_REMOTE_WRITE : 0;
  if (int r = ibv_modify_qp(qp, &attr, IBV_QP_ACCESS_FLAGS); r != 0) {
    return base::ErrnoStatus(r, allow ? "ibv_modify_qp allowing remote writes"
                                      : "ibv_modify_qp refusing remote writes");
  }
  return absl::OkStatus();
}

void Connection::RevokeRemoteAccess() {
  if (qp == nullptr) return;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  // Cannot fail from any state but RESET, where the peer has no access.
  ibv_modify_qp(qp, &attr, IBV_QP_STATE);
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
  RAMFERRY_ASSIGN_OR_RETURN(CmEvent ev, NextCmEvent(ec, deadline));
  if (ev.type != want) return UnexpectedEvent(ev, during);
  return absl::OkStatus();
}

// A refusal's reply, with `why` as its status and reason.
proto::HelloReply Refusal(const absl::Status& why) {
  proto::HelloReply reply;
  reply.status = static_cast<uint16_t>(why.code());
  reply.reason = std::string(why.message());
  return reply;
}

// The reject status the CM sends for a port no one listens on.
constexpr int kNoListener = 8;

// Both ends retry as often as the CM allows; receiver not ready: forever.
rdma_conn_param ConnParam(const uint8_t* private_data, uint8_t bytes) {
  rdma_conn_param param{};
  param.private_data = private_data;
  param.private_data_len = bytes;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  return param;
}

// Copies a connection request's private data (the Hello's wire bytes)
// into `out`, before the event is acked and frees it; returns how many
// bytes came, at most out's size.
size_t CopyPrivateData(const rdma_cm_event& ev, absl::Span<uint8_t> out) {
  const auto* data = static_cast<const uint8_t*>(ev.param.conn.private_data);
  const size_t got = std::min<size_t>(
      data == nullptr ? 0 : ev.param.conn.private_data_len, out.size());
  if (got > 0) std::copy(data, data + got, out.data());
  return got;
}

// The destination's QP for an accepted request, on `conn` (its id set),
// taken to RTS by this code, not by rdma_accept: keyed, the peer's WRITEs
// land nowhere until its proof checks out (nor does it hold a key to aim
// one with), so `remote_write` is false (review B1). Ready before the
// transport posts its receives, which a QP in RESET refuses.
absl::Status ReadyAcceptedQp(Connection& conn, const RdmaConfig& config,
                             const proto::SessionId& session,
                             bool remote_write) {
  conn.ec = rdma_create_event_channel();
  absl::Status s =
      conn.ec == nullptr
          ? RdmaErrno("rdma_create_event_channel")
          : conn.CreateQp(config, session, RdmaDomain::End::kDestination,
                          /*own=*/true);
  if (s.ok()) s = conn.ReadyPassive(remote_write);
  return s;
}

// Accepts request `id` on the QP numbered `qp_num` (this end's own), with
// `accept` as the private data.
absl::Status AcceptOn(rdma_cm_id* id, uint32_t qp_num,
                      const RdmaAccept& accept) {
  const std::vector<uint8_t> accept_bytes = EncodeRdmaAccept(accept);
  rdma_conn_param param =
      ConnParam(accept_bytes.data(), static_cast<uint8_t>(accept_bytes.size()));
  param.qp_num = qp_num;
  if (rdma_accept(id, &param) != 0) return RdmaErrno("rdma_accept");
  return absl::OkStatus();
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
  RAMFERRY_RETURN_IF_ERROR(AwaitEvent(
      conn->ec, RDMA_CM_EVENT_ADDR_RESOLVED, deadline,
      absl::StrCat(where,
                   ": resolving the address (no RDMA device has a route "
                   "to it?)")));
  if (rdma_resolve_route(conn->id, ms) != 0) {
    return RdmaErrno(absl::StrCat(where, ": rdma_resolve_route"));
  }
  RAMFERRY_RETURN_IF_ERROR(
      AwaitEvent(conn->ec, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline,
                 absl::StrCat(where, ": resolving the route")));
  return conn;
}

absl::StatusOr<RdmaAccept> ConnectWithHello(Connection& conn,
                                            absl::Span<const uint8_t> hello,
                                            absl::Time deadline,
                                            absl::string_view where) {
  rdma_conn_param param =
      ConnParam(hello.data(), static_cast<uint8_t>(hello.size()));
  if (rdma_connect(conn.id, &param) != 0) {
    return RdmaErrno(absl::StrCat(where, ": rdma_connect"));
  }
  RAMFERRY_ASSIGN_OR_RETURN(CmEvent ev, NextCmEvent(conn.ec, deadline));
  if (ev.type == RDMA_CM_EVENT_REJECTED &&
      ev.private_data.size() >= proto::kHelloReplyBytes) {
    absl::StatusOr<proto::HelloReply> refused =
        proto::DecodeHelloReply(ev.private_data);
    if (refused.ok()) return proto::HelloReplyStatus(*refused);
  }
  // The CM's own refusal, not the destination's: no listener holds that
  // port (IB_CM_REJ_INVALID_SERVICE_ID).
  if (ev.type == RDMA_CM_EVENT_REJECTED && ev.status == kNoListener) {
    return absl::UnavailableError(absl::StrFormat(
        "%s: nothing listens on that port at the destination (status %d): "
        "it is not running there, or it gave the session up (a handshake "
        "window ran out)",
        where, ev.status));
  }
  if (ev.type != RDMA_CM_EVENT_ESTABLISHED) {
    return UnexpectedEvent(ev, where);
  }
  conn.connected = true;
  return DecodeRdmaAccept(ev.private_data);
}

RdmaListener::Impl::Impl(const TransportOptions& options,
                         const RdmaConfig& config, std::string key, Admit admit,
                         Deliver deliver, Admit preview, MakeTransport make)
    : options_(options),
      config_(config),
      key_(std::move(key)),
      admit_(std::move(admit)),
      deliver_(std::move(deliver)),
      preview_(std::move(preview)),
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
  RAMFERRY_RETURN_IF_ERROR(ProbeRdma());
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
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    // The CM's events, and the completions of every connection awaiting
    // its proof; at most 100 ms, so a stop is seen, and no later than the
    // first proof deadline.
    fds.assign(1, pollfd{ec_->fd, POLLIN, 0});
    absl::Time wake = absl::Now() + absl::Milliseconds(100);
    for (const auto& [id, p] : pending_) {
      if (!p.proving) continue;
      fds.push_back(pollfd{p.conn->cc->fd, POLLIN, 0});
      wake = std::min(wake, p.proof_deadline);
    }
    const int ms = static_cast<int>(std::max<int64_t>(
        absl::ToInt64Milliseconds(wake - absl::Now()) + 1, 0));
    if (poll(fds.data(), fds.size(), ms) < 0 && errno != EINTR) continue;
    if ((fds[0].revents & POLLIN) != 0) {
      rdma_cm_event* ev;
      if (rdma_get_cm_event(ec_, &ev) == 0) OnCmEvent(ev);
    }
    CheckProofs();
  }
}

void RdmaListener::Impl::OnCmEvent(rdma_cm_event* ev) {
  rdma_cm_id* id = ev->id;
  switch (ev->event) {
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      OnConnectRequest(ev);  // acks the event
      return;
    case RDMA_CM_EVENT_ESTABLISHED: {
      rdma_ack_cm_event(ev);
      auto it = pending_.find(id);
      if (it == pending_.end()) return;
      it->second.conn->connected = true;
      if (key_.empty()) {
        DeliverAccepted(id);
        return;
      }
      // The source sends its proof as soon as it is established too: it
      // has the handshake window to arrive in, as on a socket.
      it->second.proving = true;
      it->second.proof_deadline = absl::Now() + config_.connect_timeout;
      return;
    }
    default: {  // rejected, unreachable, disconnected before delivery
      const rdma_cm_event_type type = ev->event;
      rdma_ack_cm_event(ev);
      auto it = pending_.find(id);
      if (it == pending_.end()) return;
      if (it->second.proving) {
        FailProof(it, absl::UnauthenticatedError(absl::StrFormat(
                          "authentication failed: the source left (%s) "
                          "before proving it holds the key",
                          rdma_event_str(type))));
        return;
      }
      const proto::Hello hello = it->second.hello;
      const bool admitted = it->second.admitted;
      pending_.erase(it);
      Drop(hello, admitted,
           absl::UnavailableError(absl::StrFormat(
               "channel %d was lost before it was established (%s)",
               hello.channel_index, rdma_event_str(type))));
      return;
    }
  }
}

void RdmaListener::Impl::DeliverAccepted(rdma_cm_id* id) {
  auto it = pending_.find(id);
  Pending done = std::move(it->second);
  pending_.erase(it);
  // From now on the connection's events (a disconnect) go to its own
  // channel, where the transport watches for them.
  if (rdma_migrate_id(id, done.conn->ec) != 0) {
    deliver_(done.hello, RdmaErrno("rdma_migrate_id of an accepted channel"));
    return;
  }
  deliver_(done.hello, std::move(done.accepted.transport));
}

void RdmaListener::Impl::CheckProofs() {
  const absl::Time now = absl::Now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto next = std::next(it);
    Pending& p = it->second;
    if (!p.proving) {
      it = next;
      continue;
    }
    absl::StatusOr<bool> proven = p.accepted.proof->TakeSourceProof(p.expected);
    if (!proven.ok()) {
      FailProof(it, proven.status().code() == absl::StatusCode::kUnauthenticated
                        ? proven.status()
                        : absl::UnauthenticatedError(absl::StrCat(
                              "authentication failed: the connection failed "
                              "before the source's proof arrived: ",
                              proven.status().message())));
    } else if (*proven) {
      // Only a proven peer takes the channel's slot (review B1): one who
      // merely knows the session id cannot hold it against the source.
      if (!p.admitted) {
        const proto::HelloReply claim = admit_(p.hello);
        if (!claim.accepted()) {
          p.conn->RevokeRemoteAccess();
          refused_.fetch_add(1);
          pending_.erase(it);
          it = next;
          continue;
        }
        p.admitted = true;
      }
      // Only now may the peer write: its channel is the session's.
      if (absl::Status s = p.conn->AllowRemoteWrite(true); !s.ok()) {
        p.conn->RevokeRemoteAccess();
        const proto::Hello hello = p.hello;
        pending_.erase(it);
        deliver_(hello, s);
      } else {
        DeliverAccepted(it->first);
      }
    } else if (now >= p.proof_deadline) {
      FailProof(it, absl::UnauthenticatedError(absl::StrFormat(
                        "authentication failed: no proof from the source "
                        "within %s of connecting",
                        absl::FormatDuration(config_.connect_timeout))));
    }
    it = next;
  }
}

void RdmaListener::Impl::FailProof(std::map<rdma_cm_id*, Pending>::iterator it,
                                   const absl::Status& why) {
  auth_failures_.fetch_add(1);
  refused_.fetch_add(1);
  // Nothing it sent lands any more; its transport (QP, buffers, id) goes
  // with the entry.
  it->second.conn->RevokeRemoteAccess();
  const proto::Hello hello = it->second.hello;
  const bool admitted = it->second.admitted;
  pending_.erase(it);
  if (admitted) {
    deliver_(hello,
             absl::Status(why.code(),
                          absl::StrFormat("channel %d: %s", hello.channel_index,
                                          why.message())));
  }
}

void RdmaListener::Impl::Drop(const proto::Hello& hello, bool admitted,
                              absl::Status why) {
  if (admitted) {
    deliver_(hello, std::move(why));
  } else {
    refused_.fetch_add(1);
  }
}

void RdmaListener::Impl::Reject(rdma_cm_id* id,
                                const proto::HelloReply& reply) {
  refused_.fetch_add(1);
  uint8_t reply_bytes[proto::kHelloReplyBytes];
  proto::EncodeHelloReply(reply, absl::MakeSpan(reply_bytes));
  rdma_reject(id, reply_bytes, sizeof reply_bytes);
  rdma_destroy_id(id);
}

void RdmaListener::Impl::OnConnectRequest(rdma_cm_event* ev) {
  rdma_cm_id* id = ev->id;
  // The Hello's wire bytes, which the proofs cover.
  uint8_t hello_bytes[proto::kHelloBytes] = {};
  const size_t got = CopyPrivateData(*ev, absl::MakeSpan(hello_bytes));
  rdma_ack_cm_event(ev);
  absl::StatusOr<proto::Hello> decoded =
      DecodeChannelHello(absl::MakeConstSpan(hello_bytes, got));
  if (!decoded.ok()) return Reject(id, Refusal(decoded.status()));
  const proto::Hello hello = *decoded;
  if (absl::Status s = CheckHelloAuth(!key_.empty(), hello.auth); !s.ok()) {
    if (!key_.empty()) auth_failures_.fetch_add(1);
    return Reject(id, Refusal(s));
  }
  // Keyed with a preview, the slot is claimed after the proof (CheckProofs).
  const bool admitted = key_.empty() || preview_ == nullptr;
  RdmaAccept accept{admitted ? admit_(hello) : preview_(hello), std::nullopt};
  if (!accept.reply.accepted()) return Reject(id, accept.reply);
  proto::AuthMac expected{};
  if (!key_.empty()) {
    RdmaSourceChallenge c = ChallengeSource(key_, hello_bytes);
    accept.challenge = c.challenge;
    expected = c.expected;
  }
  auto conn = std::make_unique<Connection>();
  conn->id = id;
  RdmaConfig config = config_;
  config.capabilities = accept.reply.capabilities;
  absl::Status s = ReadyAcceptedQp(*conn, config, hello.session,
                                   /*remote_write=*/key_.empty());
  Connection* c = conn.get();
  AcceptedTransport accepted;
  if (s.ok()) s = make_(std::move(conn), options_, config, &accepted);
  // Admitted, whatever fails from here is delivered as a lost channel:
  // its slot must not stay reserved for a connection that never comes.
  if (!s.ok()) {
    rdma_reject(id, nullptr, 0);
    Drop(hello, admitted, s);
    return;  // the id goes with conn, or with the transport made of it
  }
  s = AcceptOn(id, c->qp->qp_num, accept);
  if (!s.ok()) {
    Drop(hello, admitted, s);
    return;
  }
  Pending& p = pending_[id] = {std::move(accepted), c, hello, expected};
  p.admitted = admitted;
}

}  // namespace ramferry::channels
