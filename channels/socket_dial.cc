#include "channels/socket_dial.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"
#include "base/status_macros.h"
#include "channels/socket_io.h"
#include "proto/auth.h"
#include "proto/wire.h"

namespace ramferry::channels {
namespace asio = boost::asio;

namespace {

absl::Status AnnotateStatus(const absl::Status& s, absl::string_view what) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

// Keyed: checks the destination's proof in `challenge_bytes` (of the Hello
// `hello_bytes` we sent) and, only if it holds, sends ours. Returns the
// challenge's nonce, which the seal keys are derived with.
absl::StatusOr<proto::AuthNonce> AnswerChallenge(
    int fd, absl::string_view key, absl::Span<const uint8_t> hello_bytes,
    absl::Span<const uint8_t> challenge_bytes, absl::Time deadline) {
  if (key.empty()) {
    return absl::UnauthenticatedError(
        "destination demands authentication: give the source the "
        "destination's key");
  }
  RAMFERRY_ASSIGN_OR_RETURN(proto::AuthChallenge challenge,
                            proto::DecodeAuthChallenge(challenge_bytes));
  const proto::AuthMac expected = proto::ComputeAuthMac(
      key, proto::AuthSide::kDestination, hello_bytes, challenge.nonce);
  if (!proto::AuthMacEquals(expected, challenge.proof)) {
    return absl::UnauthenticatedError(
        "destination failed to prove it holds the key (a different key, "
        "or not the destination meant); nothing was sent");
  }
  proto::AuthProof proof;
  proof.proof = proto::ComputeAuthMac(key, proto::AuthSide::kSource,
                                      hello_bytes, challenge.nonce);
  uint8_t proof_bytes[proto::kAuthProofBytes];
  proto::EncodeAuthProof(proof, absl::MakeSpan(proof_bytes));
  if (absl::Status s = WriteWithDeadline(fd, proof_bytes, deadline); !s.ok()) {
    return AnnotateStatus(s, "sending authentication proof");
  }
  return challenge.nonce;
}

}  // namespace

absl::StatusOr<int> ConnectWithRetry(const std::string& host, uint16_t port,
                                     absl::Duration timeout) {
  const std::string where = absl::StrFormat("%s:%d", host, port);
  const absl::Time deadline = absl::Now() + timeout;
  asio::io_context io;
  asio::ip::tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot resolve %s: %s", host, ec.message()));
  }
  while (true) {
    asio::ip::tcp::socket socket(io);
    boost::system::error_code result = asio::error::would_block;
    asio::async_connect(
        socket, endpoints,
        [&](const boost::system::error_code& e, const auto&) { result = e; });
    io.restart();
    io.run_for(absl::ToChronoNanoseconds(
        std::max(deadline - absl::Now(), absl::Milliseconds(1))));
    if (result == asio::error::would_block) {
      socket.close();  // cancels the attempt; run the handler out
      io.restart();
      io.run();
      return absl::DeadlineExceededError(
          absl::StrFormat("connecting to %s: no connection within %s", where,
                          absl::FormatDuration(timeout)));
    }
    if (!result) {
      socket.set_option(asio::ip::tcp::no_delay(true), ec);
      int fd = socket.release();
      if (absl::Status s = channels::MakeBlocking(fd); !s.ok()) {
        close(fd);
        return s;
      }
      return fd;
    }
    const bool retry = result == asio::error::connection_refused ||
                       result == asio::error::timed_out ||
                       result == asio::error::host_unreachable;
    if (!retry || absl::Now() + absl::Milliseconds(50) >= deadline) {
      return absl::UnavailableError(
          absl::StrFormat("connecting to %s: %s (gave up after %s)", where,
                          result.message(), absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::Status PollUntil(int fd, short events, absl::Time deadline,
                       const char* what) {
  while (true) {
    int ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (left <= 0) {
        return absl::DeadlineExceededError(
            absl::StrFormat("%s: timed out", what));
      }
      ms = static_cast<int>(std::min<int64_t>(left, 1 << 30));
    }
    pollfd p{fd, events, 0};
    int r = poll(&p, 1, ms);
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR) return base::ErrnoStatus(errno, what);
  }
}

absl::Status WriteWithDeadline(int fd, absl::Span<const uint8_t> data,
                               absl::Time deadline) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      RAMFERRY_RETURN_IF_ERROR(PollUntil(fd, POLLOUT, deadline, "send"));
      continue;
    }
    return base::ErrnoStatus(n < 0 ? errno : EPIPE, "send");
  }
  return absl::OkStatus();
}

absl::Status ReadWithDeadline(int fd, absl::Span<uint8_t> buf,
                              absl::Time deadline) {
  while (!buf.empty()) {
    ssize_t n = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n > 0) {
      buf.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return absl::UnavailableError("connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      RAMFERRY_RETURN_IF_ERROR(PollUntil(fd, POLLIN, deadline, "receive"));
      continue;
    }
    return base::ErrnoStatus(errno, "recv");
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::HelloReply> ExchangeHello(int fd, proto::Hello hello,
                                                absl::string_view key,
                                                absl::Time deadline,
                                                proto::SealKeys* keys) {
  hello.auth = key.empty() ? proto::kAuthNone : proto::kAuthHmacSha256;
  uint8_t out[proto::kHelloBytes];
  proto::EncodeHello(hello, absl::MakeSpan(out));
  if (absl::Status s = WriteWithDeadline(fd, out, deadline); !s.ok()) {
    return AnnotateStatus(s, "sending hello");
  }
  // A challenge (64 bytes) or a reply (128): the magic tells which.
  static_assert(proto::kAuthChallengeBytes < proto::kHelloReplyBytes);
  uint8_t in[proto::kHelloReplyBytes];
  auto first = absl::MakeSpan(in).subspan(0, proto::kAuthChallengeBytes);
  if (absl::Status s = ReadWithDeadline(fd, first, deadline); !s.ok()) {
    return AnnotateStatus(s, key.empty() ? "awaiting hello reply"
                                         : "awaiting authentication challenge");
  }
  const bool challenged = proto::Load32(in) == proto::kAuthChallengeMagic;
  proto::AuthNonce nonce{};
  if (challenged) {
    RAMFERRY_ASSIGN_OR_RETURN(nonce,
                              AnswerChallenge(fd, key, out, first, deadline));
    first = absl::MakeSpan(in);  // the reply comes whole after the proof
  } else {
    first = absl::MakeSpan(in).subspan(proto::kAuthChallengeBytes);
  }
  if (absl::Status s = ReadWithDeadline(fd, first, deadline); !s.ok()) {
    return AnnotateStatus(s, "awaiting hello reply");
  }
  absl::StatusOr<proto::HelloReply> reply = proto::DecodeHelloReply(in);
  if (!reply.ok()) return reply.status();
  RAMFERRY_RETURN_IF_ERROR(proto::HelloReplyStatus(*reply));
  // Fail closed: with a key, an unauthenticated destination gets nothing.
  if (!key.empty() && !challenged) {
    return absl::UnauthenticatedError(
        "destination accepted without proving it holds the key; refusing to "
        "send it memory");
  }
  if (keys != nullptr && challenged) {
    RAMFERRY_ASSIGN_OR_RETURN(proto::SealKeys derived,
                              proto::DeriveSealKeys(key, out, in, nonce));
    *keys = derived;
  }
  return reply;
}

}  // namespace ramferry::channels
