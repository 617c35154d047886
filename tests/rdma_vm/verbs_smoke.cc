// rdma_verbs_smoke: proves that the Soft-RoCE VM gives real verbs traffic.
//
// Inside the VM of tests/rdma_vm/run.sh (device rxe0, address $RXE_IP):
//   1. opens the RDMA device and prints its main limits;
//   2. creates an RC QP asking for 512 bytes of inline data and prints what
//      the provider granted (QP creation is the only way to learn it);
//   3. connects an rdmacm listener and a client on $RXE_IP, each in its own
//      thread, and moves data both ways the verbs way: the server hands out
//      (address, rkey) of a buffer in the accept's private data, the client
//      RDMA-WRITEs a pattern into it and then SENDs a message (inline when
//      it fits). RC ordering means the SEND arrives after the WRITE landed,
//      so the server checks both as soon as the receive completes.
// Exit status 0 when everything checked out, 1 otherwise (with the reason).

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kAskInline = 512;
constexpr size_t kWriteBytes = 256 * 1024;
constexpr size_t kMessageBytes = 200;  // below rxe's inline limit
constexpr int kStepTimeoutMs = 30000;

// What the server tells the client in the accept's private data.
struct RemoteBuffer {
  uint64_t addr;
  uint32_t rkey;
  uint32_t length;
};

void Report(const char* who, const std::string& what) {
  std::fprintf(stderr, "verbs_smoke: %s: %s\n", who, what.c_str());
}

std::string Errno(const char* call) {
  return std::string(call) + " failed: " + std::strerror(errno);
}

uint8_t PatternByte(size_t i) {
  return static_cast<uint8_t>((i * 131 + 7) ^ (i >> 9));
}

std::string MtuBytes(ibv_mtu mtu) {
  return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? std::to_string(128 << mtu)
                                                   : "?";
}

// Waits for the next rdmacm event on `channel` and requires it to be
// `expected`. On success the caller owns *out and must ack it.
bool WaitEvent(const char* who, rdma_event_channel* channel,
               rdma_cm_event_type expected, rdma_cm_event** out) {
  pollfd pfd{channel->fd, POLLIN, 0};
  int ready = ::poll(&pfd, 1, kStepTimeoutMs);
  if (ready <= 0) {
    Report(who, std::string("no rdmacm event within ") +
                    std::to_string(kStepTimeoutMs) + " ms while waiting for " +
                    rdma_event_str(expected));
    return false;
  }
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel, &event) != 0) {
    Report(who, Errno("rdma_get_cm_event"));
    return false;
  }
  if (event->event != expected) {
    Report(who, std::string("expected ") + rdma_event_str(expected) + ", got " +
                    rdma_event_str(event->event) + " (status " +
                    std::to_string(event->status) + ")");
    rdma_ack_cm_event(event);
    return false;
  }
  *out = event;
  return true;
}

bool WaitAndAck(const char* who, rdma_event_channel* channel,
                rdma_cm_event_type expected) {
  rdma_cm_event* event = nullptr;
  if (!WaitEvent(who, channel, expected, &event)) return false;
  rdma_ack_cm_event(event);
  return true;
}

// Polls `cq` until `count` successful completions arrived.
bool PollCompletions(const char* who, ibv_cq* cq, int count,
                     std::vector<ibv_wc>* seen) {
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(kStepTimeoutMs);
  while (count > 0) {
    ibv_wc wc{};
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) {
      Report(who, "ibv_poll_cq failed");
      return false;
    }
    if (n == 0) {
      if (Clock::now() > deadline) {
        Report(who, "completion did not arrive within " +
                        std::to_string(kStepTimeoutMs) + " ms");
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    if (wc.status != IBV_WC_SUCCESS) {
      Report(who, std::string("work request ") + std::to_string(wc.wr_id) +
                      " failed: " + ibv_wc_status_str(wc.status));
      return false;
    }
    if (seen) seen->push_back(wc);
    --count;
  }
  return true;
}

// Verbs objects of one connected end; torn down in reverse order.
struct Endpoint {
  const char* who;
  rdma_event_channel* channel = nullptr;
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  std::vector<ibv_mr*> mrs;
  bool has_qp = false;

  explicit Endpoint(const char* name) : who(name) {}
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;
  ~Endpoint() {
    if (has_qp) rdma_destroy_qp(id);
    for (ibv_mr* mr : mrs) ibv_dereg_mr(mr);
    if (cq) ibv_destroy_cq(cq);
    if (pd) ibv_dealloc_pd(pd);
    if (id) rdma_destroy_id(id);
    if (channel) rdma_destroy_event_channel(channel);
  }

  // PD, CQ and an RC QP on the device this id is bound to.
  bool CreateQp() {
    pd = ibv_alloc_pd(id->verbs);
    if (!pd) return Fail(Errno("ibv_alloc_pd"));
    cq = ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0);
    if (!cq) return Fail(Errno("ibv_create_cq"));
    ibv_qp_init_attr attr{};
    attr.send_cq = cq;
    attr.recv_cq = cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = 8;
    attr.cap.max_recv_wr = 8;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    attr.cap.max_inline_data = kAskInline;
    if (rdma_create_qp(id, pd, &attr) != 0)
      return Fail(Errno("rdma_create_qp"));
    has_qp = true;
    max_inline = attr.cap.max_inline_data;
    return true;
  }

  ibv_mr* Register(void* buf, size_t len, int access) {
    ibv_mr* mr = ibv_reg_mr(pd, buf, len, access);
    if (!mr)
      Fail(Errno("ibv_reg_mr"));
    else
      mrs.push_back(mr);
    return mr;
  }

  bool Fail(const std::string& what) {
    Report(who, what);
    return false;
  }

  uint32_t max_inline = 0;
};

// ---------------------------------------------------------------- probe

bool ProbeDevice(uint32_t* granted_inline) {
  const char* who = "probe";
  int num = 0;
  ibv_device** list = ibv_get_device_list(&num);
  if (!list || num == 0) {
    Report(who, "no RDMA device (run inside the rxe VM: tests/rdma_vm/run.sh)");
    if (list) ibv_free_device_list(list);
    return false;
  }
  const char* want = std::getenv("RXE_DEVICE");
  ibv_device* dev = list[0];
  for (int i = 0; want && i < num; ++i) {
    if (std::strcmp(ibv_get_device_name(list[i]), want) == 0) dev = list[i];
  }
  bool ok = false;
  ibv_context* ctx = ibv_open_device(dev);
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_device_attr attr{};
  ibv_port_attr port{};
  ibv_qp_init_attr qattr{};
  if (!ctx) {
    Report(who, Errno("ibv_open_device"));
    goto out;
  }
  if (ibv_query_device(ctx, &attr) != 0 || ibv_query_port(ctx, 1, &port) != 0) {
    Report(who, Errno("ibv_query_device/port"));
    goto out;
  }
  std::printf(
      "device %s: max_qp_wr %d, max_sge %d, max_cqe %d, port 1 %s, active_mtu "
      "%s\n",
      ibv_get_device_name(dev), attr.max_qp_wr, attr.max_sge, attr.max_cqe,
      ibv_port_state_str(port.state), MtuBytes(port.active_mtu).c_str());
  pd = ibv_alloc_pd(ctx);
  cq = pd ? ibv_create_cq(ctx, 4, nullptr, nullptr, 0) : nullptr;
  if (!cq) {
    Report(who, Errno("ibv_alloc_pd/ibv_create_cq"));
    goto out;
  }
  qattr.send_cq = cq;
  qattr.recv_cq = cq;
  qattr.qp_type = IBV_QPT_RC;
  qattr.cap.max_send_wr = 4;
  qattr.cap.max_recv_wr = 4;
  qattr.cap.max_send_sge = 1;
  qattr.cap.max_recv_sge = 1;
  qattr.cap.max_inline_data = kAskInline;
  qp = ibv_create_qp(pd, &qattr);
  if (!qp) {
    Report(who, Errno("ibv_create_qp asking for 512 bytes of inline data"));
    goto out;
  }
  *granted_inline = qattr.cap.max_inline_data;
  std::printf("max_inline_data: asked %u, granted %u\n", kAskInline,
              *granted_inline);
  ok = true;
out:
  if (qp) ibv_destroy_qp(qp);
  if (cq) ibv_destroy_cq(cq);
  if (pd) ibv_dealloc_pd(pd);
  if (ctx) ibv_close_device(ctx);
  ibv_free_device_list(list);
  return ok;
}

// --------------------------------------------------------------- server

bool Server(const sockaddr_in& bind_to, std::promise<uint16_t>* port_out) {
  Endpoint listener("server");
  bool port_sent = false;
  auto give_port = [&](uint16_t port) {
    if (!port_sent) port_out->set_value(port);
    port_sent = true;
  };
  auto fail = [&](const std::string& what) {
    give_port(0);
    return listener.Fail(what);
  };

  listener.channel = rdma_create_event_channel();
  if (!listener.channel) return fail(Errno("rdma_create_event_channel"));
  if (rdma_create_id(listener.channel, &listener.id, nullptr, RDMA_PS_TCP) != 0)
    return fail(Errno("rdma_create_id"));
  sockaddr_in addr = bind_to;
  addr.sin_port = 0;  // any free port
  if (rdma_bind_addr(listener.id, reinterpret_cast<sockaddr*>(&addr)) != 0)
    return fail(Errno("rdma_bind_addr"));
  if (rdma_listen(listener.id, 1) != 0) return fail(Errno("rdma_listen"));
  give_port(ntohs(rdma_get_src_port(listener.id)));

  rdma_cm_event* request = nullptr;
  if (!WaitEvent("server", listener.channel, RDMA_CM_EVENT_CONNECT_REQUEST,
                 &request))
    return false;
  Endpoint conn("server");
  conn.id = request->id;  // shares the listener's event channel
  rdma_ack_cm_event(request);
  if (!conn.CreateQp()) return false;

  std::vector<uint8_t> target(kWriteBytes, 0);
  std::vector<char> inbox(kMessageBytes + 1, 0);
  ibv_mr* target_mr =
      conn.Register(target.data(), target.size(),
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ibv_mr* inbox_mr =
      conn.Register(inbox.data(), inbox.size(), IBV_ACCESS_LOCAL_WRITE);
  if (!target_mr || !inbox_mr) return false;

  ibv_sge sge{reinterpret_cast<uintptr_t>(inbox.data()),
              static_cast<uint32_t>(inbox.size()), inbox_mr->lkey};
  ibv_recv_wr recv{};
  recv.wr_id = 1;
  recv.sg_list = &sge;
  recv.num_sge = 1;
  ibv_recv_wr* bad_recv = nullptr;
  if (ibv_post_recv(conn.id->qp, &recv, &bad_recv) != 0)
    return conn.Fail(Errno("ibv_post_recv"));

  RemoteBuffer offer{reinterpret_cast<uintptr_t>(target.data()),
                     target_mr->rkey, static_cast<uint32_t>(target.size())};
  rdma_conn_param param{};
  param.private_data = &offer;
  param.private_data_len = sizeof offer;
  param.responder_resources = 1;
  param.initiator_depth = 1;
  param.rnr_retry_count = 7;
  if (rdma_accept(conn.id, &param) != 0) return conn.Fail(Errno("rdma_accept"));
  if (!WaitAndAck("server", listener.channel, RDMA_CM_EVENT_ESTABLISHED))
    return false;

  std::vector<ibv_wc> wcs;
  if (!PollCompletions("server", conn.cq, 1, &wcs)) return false;
  if (wcs[0].opcode != IBV_WC_RECV || wcs[0].byte_len != kMessageBytes)
    return conn.Fail("unexpected receive completion: opcode " +
                     std::to_string(wcs[0].opcode) + ", " +
                     std::to_string(wcs[0].byte_len) + " bytes");
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] != PatternByte(i))
      return conn.Fail("RDMA WRITE data wrong at byte " + std::to_string(i));
  }
  std::string message(inbox.data(), kMessageBytes);
  if (message.rfind("ramferry rxe smoke", 0) != 0)
    return conn.Fail("SEND payload wrong");
  std::printf(
      "server: RDMA WRITE of %zu bytes verified, SEND of %u bytes received\n",
      target.size(), wcs[0].byte_len);

  // The client disconnects once its completions are in.
  return WaitAndAck("server", listener.channel, RDMA_CM_EVENT_DISCONNECTED);
}

// --------------------------------------------------------------- client

bool Client(sockaddr_in server) {
  Endpoint ep("client");
  ep.channel = rdma_create_event_channel();
  if (!ep.channel) return ep.Fail(Errno("rdma_create_event_channel"));
  if (rdma_create_id(ep.channel, &ep.id, nullptr, RDMA_PS_TCP) != 0)
    return ep.Fail(Errno("rdma_create_id"));
  if (rdma_resolve_addr(ep.id, nullptr, reinterpret_cast<sockaddr*>(&server),
                        5000) != 0)
    return ep.Fail(Errno("rdma_resolve_addr"));
  if (!WaitAndAck("client", ep.channel, RDMA_CM_EVENT_ADDR_RESOLVED))
    return false;
  if (rdma_resolve_route(ep.id, 5000) != 0)
    return ep.Fail(Errno("rdma_resolve_route"));
  if (!WaitAndAck("client", ep.channel, RDMA_CM_EVENT_ROUTE_RESOLVED))
    return false;
  if (!ep.CreateQp()) return false;

  std::vector<uint8_t> source(kWriteBytes);
  for (size_t i = 0; i < source.size(); ++i) source[i] = PatternByte(i);
  std::string message = "ramferry rxe smoke: SEND after RDMA WRITE";
  message.resize(kMessageBytes, '.');
  ibv_mr* source_mr =
      ep.Register(source.data(), source.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* message_mr =
      ep.Register(message.data(), message.size(), IBV_ACCESS_LOCAL_WRITE);
  if (!source_mr || !message_mr) return false;

  rdma_conn_param param{};
  param.responder_resources = 1;
  param.initiator_depth = 1;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  if (rdma_connect(ep.id, &param) != 0) return ep.Fail(Errno("rdma_connect"));
  rdma_cm_event* established = nullptr;
  if (!WaitEvent("client", ep.channel, RDMA_CM_EVENT_ESTABLISHED, &established))
    return false;
  RemoteBuffer remote{};
  bool have_offer = established->param.conn.private_data &&
                    established->param.conn.private_data_len >= sizeof remote;
  if (have_offer)
    std::memcpy(&remote, established->param.conn.private_data, sizeof remote);
  rdma_ack_cm_event(established);
  if (!have_offer)
    return ep.Fail("no buffer offer in the accept's private data");
  if (remote.length < source.size()) return ep.Fail("offered buffer too small");

  ibv_sge write_sge{reinterpret_cast<uintptr_t>(source.data()),
                    static_cast<uint32_t>(source.size()), source_mr->lkey};
  ibv_send_wr write{};
  write.wr_id = 10;
  write.opcode = IBV_WR_RDMA_WRITE;
  write.send_flags = IBV_SEND_SIGNALED;
  write.sg_list = &write_sge;
  write.num_sge = 1;
  write.wr.rdma.remote_addr = remote.addr;
  write.wr.rdma.rkey = remote.rkey;

  const bool inline_send = message.size() <= ep.max_inline;
  ibv_sge send_sge{reinterpret_cast<uintptr_t>(message.data()),
                   static_cast<uint32_t>(message.size()), message_mr->lkey};
  ibv_send_wr send{};
  send.wr_id = 11;
  send.opcode = IBV_WR_SEND;
  send.send_flags = IBV_SEND_SIGNALED | (inline_send ? IBV_SEND_INLINE : 0);
  send.sg_list = &send_sge;
  send.num_sge = 1;
  write.next = &send;  // one post, two work requests, in order

  const auto t0 = Clock::now();
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(ep.id->qp, &write, &bad) != 0)
    return ep.Fail(Errno("ibv_post_send"));
  std::vector<ibv_wc> wcs;
  if (!PollCompletions("client", ep.cq, 2, &wcs)) return false;
  const double us =
      std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  if (wcs[0].opcode != IBV_WC_RDMA_WRITE || wcs[1].opcode != IBV_WC_SEND)
    return ep.Fail("completions out of order");
  std::printf(
      "client: RDMA WRITE %zu bytes + SEND %zu bytes (%s) completed in %.0f "
      "us\n",
      source.size(), message.size(), inline_send ? "inline" : "not inline", us);

  if (rdma_disconnect(ep.id) != 0) return ep.Fail(Errno("rdma_disconnect"));
  return WaitAndAck("client", ep.channel, RDMA_CM_EVENT_DISCONNECTED);
}

}  // namespace

int main() {
  const auto t0 = Clock::now();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* ip = std::getenv("RXE_IP");
  if (!ip || !*ip) {
    Report("setup",
           "RXE_IP is not set (run inside the rxe VM: tests/rdma_vm/run.sh)");
    return 1;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, ip, &addr.sin_addr) != 1) {
    Report("setup", std::string("RXE_IP is not an IPv4 address: ") + ip);
    return 1;
  }

  uint32_t granted = 0;
  if (!ProbeDevice(&granted)) return 1;

  std::promise<uint16_t> port_promise;
  std::future<uint16_t> port_future = port_promise.get_future();
  bool server_ok = false;
  bool client_ok = false;
  std::thread server([&] { server_ok = Server(addr, &port_promise); });
  uint16_t port = 0;
  if (port_future.wait_for(std::chrono::milliseconds(kStepTimeoutMs)) ==
      std::future_status::ready)
    port = port_future.get();
  if (port != 0) {
    std::printf("server: listening on %s:%u\n", ip, port);
    sockaddr_in target = addr;
    target.sin_port = htons(port);
    std::thread client([&] { client_ok = Client(target); });
    client.join();
  } else {
    Report("client", "the server never listened");
  }
  server.join();

  const double ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!server_ok || !client_ok) {
    std::printf("verbs_smoke: FAILED after %.0f ms\n", ms);
    return 1;
  }
  std::printf("verbs_smoke: OK (max_inline_data %u) in %.0f ms\n", granted, ms);
  return 0;
}
