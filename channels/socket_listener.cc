#include "channels/socket_listener.h"

#include <unistd.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <list>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "channels/socket_io.h"
#include "channels/transport_family.h"
#include "proto/auth.h"

namespace ramferry::channels {
namespace asio = boost::asio;
using asio::ip::tcp;

class SocketListener::Impl {
 public:
  Impl(const Options& options, Admit admit, Deliver deliver)
      : options_(options),
        admit_(std::move(admit)),
        deliver_(std::move(deliver)),
        acceptor_(io_),
        work_(asio::make_work_guard(io_)) {}

  ~Impl() { Stop(); }

  absl::Status Bind() {
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(options_.host, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrFormat("listen address '%s' is not an IP address: %s",
                          options_.host, ec.message()));
    }
    tcp::endpoint endpoint(addr, options_.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrFormat("cannot listen on %s:%d: %s", options_.host,
                          options_.port, ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    return absl::OkStatus();
  }

  void Start() {
    AcceptNext();
    thread_ = std::thread([this] { io_.run(); });
  }

  void Stop() {
    if (stopped_.exchange(true)) return;
    io_.stop();
    if (thread_.joinable()) thread_.join();
    // The Asio thread is gone: closing here races with nothing. Pending
    // handshakes close when io_ destroys their handlers.
    boost::system::error_code ec;
    acceptor_.close(ec);
  }

  uint16_t port() const { return port_; }
  uint64_t refused() const { return refused_.load(); }
  uint64_t auth_failures() const { return auth_failures_.load(); }

 private:
  struct Pending {
    explicit Pending(tcp::socket s)
        : socket(std::move(s)), timer(socket.get_executor()) {}
    tcp::socket socket;
    asio::steady_timer timer;
    uint8_t hello[proto::kHelloBytes];
    uint8_t challenge[proto::kAuthChallengeBytes];
    uint8_t proof[proto::kAuthProofBytes];
    uint8_t reply[proto::kHelloReplyBytes];
    proto::AuthNonce nonce{};
    proto::Hello decoded;
    bool proven = false;                  // the source proved it holds the key
    std::optional<proto::SealKeys> keys;  // derived with the reply
    bool admitted = false;
    bool evicted = false;
    std::list<std::shared_ptr<Pending>>::iterator in_list;
  };

  void AcceptNext() {
    acceptor_.async_accept(
        [this](boost::system::error_code ec, tcp::socket socket) {
          if (ec == asio::error::operation_aborted || !acceptor_.is_open()) {
            return;
          }
          if (!ec) {
            if (pending_.size() >= static_cast<size_t>(options_.max_pending) &&
                !EvictOldest()) {
              refused_.fetch_add(1);
              socket.close(ec);
            } else {
              Handshake(std::make_shared<Pending>(std::move(socket)));
            }
          }
          AcceptNext();
        });
  }

  // Full: the oldest handshake not yet admitted makes room. An honest
  // peer finishes its handshake in a round trip or two, so a flood must
  // outpace that to push one out, while a flood of idle connections only
  // ever evicts its own members.
  bool EvictOldest() {
    for (const std::shared_ptr<Pending>& p : pending_) {
      if (p->admitted || p->evicted) continue;
      p->evicted = true;
      boost::system::error_code ignored;
      p->socket.close(ignored);  // its pending operation ends in Finish
      return true;
    }
    return false;
  }

  void Handshake(const std::shared_ptr<Pending>& p) {
    p->in_list = pending_.insert(pending_.end(), p);
    p->timer.expires_after(
        absl::ToChronoNanoseconds(options_.handshake_timeout));
    p->timer.async_wait([p](boost::system::error_code ec) {
      if (!ec) {
        boost::system::error_code ignored;
        p->socket.close(ignored);  // fails the pending read or write
      }
    });
    asio::async_read(p->socket, asio::buffer(p->hello),
                     [this, p](boost::system::error_code ec, size_t) {
                       if (ec) return Finish(p);
                       OnHello(p);
                     });
  }

  void OnHello(const std::shared_ptr<Pending>& p) {
    absl::StatusOr<proto::Hello> hello = DecodeChannelHello(p->hello);
    if (!hello.ok()) return Reply(p, Refusal(hello.status()));
    p->decoded = *hello;
    const bool keyed = !options_.key.empty();
    if (keyed && hello->auth != proto::kAuthHmacSha256) {
      auth_failures_.fetch_add(1);
      return Reply(p, Refusal(absl::UnauthenticatedError(
                          "destination requires authentication: give the "
                          "source the same key")));
    }
    if (!keyed && hello->auth != proto::kAuthNone) {
      return Reply(p, Refusal(absl::UnauthenticatedError(
                          "destination has no key, so it cannot "
                          "authenticate; give both ends the same key")));
    }
    if (!keyed) return Reply(p, admit_(*hello));
    proto::AuthChallenge challenge;
    p->nonce = proto::NewAuthNonce();
    challenge.nonce = p->nonce;
    challenge.proof = proto::ComputeAuthMac(
        options_.key, proto::AuthSide::kDestination, p->hello, p->nonce);
    proto::EncodeAuthChallenge(challenge, absl::MakeSpan(p->challenge));
    asio::async_write(p->socket, asio::buffer(p->challenge),
                      [this, p](boost::system::error_code ec, size_t) {
                        if (ec) return Finish(p);
                        asio::async_read(
                            p->socket, asio::buffer(p->proof),
                            [this, p](boost::system::error_code ec, size_t) {
                              if (ec) return Finish(p);
                              OnProof(p);
                            });
                      });
  }

  void OnProof(const std::shared_ptr<Pending>& p) {
    absl::StatusOr<proto::AuthProof> proof = proto::DecodeAuthProof(p->proof);
    if (!proof.ok()) {
      auth_failures_.fetch_add(1);
      return Reply(p, Refusal(proof.status()));
    }
    const proto::AuthMac expected = proto::ComputeAuthMac(
        options_.key, proto::AuthSide::kSource, p->hello, p->nonce);
    if (!proto::AuthMacEquals(expected, proof->proof)) {
      auth_failures_.fetch_add(1);
      return Reply(p, Refusal(absl::UnauthenticatedError(
                          "authentication failed: the source holds a "
                          "different key")));
    }
    p->proven = true;
    Reply(p, admit_(p->decoded));
  }

  static proto::HelloReply Refusal(const absl::Status& why) {
    proto::HelloReply reply;
    reply.status = static_cast<uint16_t>(why.code());
    reply.reason = std::string(why.message());
    return reply;
  }

  void Reply(const std::shared_ptr<Pending>& p,
             const proto::HelloReply& reply) {
    p->admitted = reply.accepted();
    proto::EncodeHelloReply(reply, absl::MakeSpan(p->reply));
    if (p->admitted && p->proven) {
      // Over the reply as it goes: see proto::DeriveSealKeys.
      absl::StatusOr<proto::SealKeys> keys =
          proto::DeriveSealKeys(options_.key, p->hello, p->reply, p->nonce);
      if (!keys.ok()) {
        p->admitted = false;
        deliver_(p->decoded, -1, nullptr);
        proto::EncodeHelloReply(Refusal(keys.status()),
                                absl::MakeSpan(p->reply));
      } else {
        p->keys = *keys;
      }
    }
    asio::async_write(p->socket, asio::buffer(p->reply),
                      [this, p](boost::system::error_code ec, size_t) {
                        if (ec && p->admitted) {
                          p->admitted = false;
                          deliver_(p->decoded, -1, nullptr);
                        }
                        Finish(p);
                      });
  }

  void Finish(const std::shared_ptr<Pending>& p) {
    pending_.erase(p->in_list);
    p->timer.cancel();
    if (p->admitted) {
      int fd = p->socket.release();
      if (!MakeBlocking(fd).ok()) {
        close(fd);
        fd = -1;
      }
      deliver_(p->decoded, fd, p->keys ? &*p->keys : nullptr);
      return;
    }
    refused_.fetch_add(1);
    boost::system::error_code ignored;
    p->socket.close(ignored);
  }

  const Options options_;
  const Admit admit_;
  const Deliver deliver_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  uint16_t port_ = 0;
  // Handshakes in progress, oldest first; acceptor thread only.
  std::list<std::shared_ptr<Pending>> pending_;
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> auth_failures_{0};
  std::atomic<bool> stopped_{false};
};

absl::StatusOr<std::unique_ptr<SocketListener>> SocketListener::Listen(
    const Options& options, Admit admit, Deliver deliver) {
  auto impl =
      std::make_unique<Impl>(options, std::move(admit), std::move(deliver));
  RAMFERRY_RETURN_IF_ERROR(impl->Bind());
  return std::unique_ptr<SocketListener>(new SocketListener(std::move(impl)));
}

SocketListener::SocketListener(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
SocketListener::~SocketListener() = default;
uint16_t SocketListener::port() const { return impl_->port(); }
void SocketListener::Start() { impl_->Start(); }
void SocketListener::Stop() { impl_->Stop(); }
uint64_t SocketListener::refused() const { return impl_->refused(); }
uint64_t SocketListener::auth_failures() const {
  return impl_->auth_failures();
}

}  // namespace ramferry::channels
