// The --control protocol, fed whole request streams: a real ControlServer
// wired to a real LiveControl (ServeControl, as ramferry-migrate does), its
// session a fake one whose hooks count what they are asked (a real
// Sender per input would cost more than it finds here: the hooks are all
// the control reaches of a session). Up to four clients write arbitrary
// bytes, split into arbitrary writes, and shut down; between their writes
// the migration's side moves on (states, a session coming and going, the
// commit point, events, the end).
//
// Input: a config byte, then operations until the input ends.
//   config bit 0: destination (else source); bits 1-2: clients - 1;
//          bit 3: post-copy on; bit 4: a session from the start
//   op & 7 == 0..3: write to client (op >> 3) & 3: a length byte, then
//                   that many bytes (fewer where the input ends)
//            4: client (op >> 3) & 3 shuts down its writing side
//            5: a step of the migration, chosen by the next byte
//            6: client (op >> 3) & 3 writes (next byte + 1) * 512 bytes of
//               one repeated byte (the byte after): reaches the line limit
//            7: every client reads what has come
//
// Properties, beside no crash and no leak:
// - every complete line a client wrote gets exactly one reply, in order
//   (an empty or blank line none), until a line over kMaxLine, which gets
//   one error reply, after which the connection ends (EOF);
//   a last line without a newline is answered at the client's EOF;
// - every line that comes back is one JSON object: a reply ({"ok": bool},
//   with an error's code and message when not ok) or an event;
// - a cancel acknowledged before the commit point fails Commit(), and no
//   cancel is acknowledged after it;
// - the server never holds more clients than it was given.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/owned_fd.h"
#include "ramferry/stats.h"
#include "tests/fuzz/fuzz_support.h"
#include "tools/common/control_socket.h"
#include "tools/common/json.h"
#include "tools/migrate/live_control.h"

namespace ramferry::fuzz {
namespace {

using cli::ControlServer;
using cli::Json;
using migrate::LiveControl;
using migrate::MigrationState;

constexpr absl::Duration kPatience = absl::Seconds(10);

// What the server owes a client for what it wrote: the replies to its
// complete lines, and whether a line over the limit ends the connection.
struct Owed {
  size_t replies = 0;
  bool refused = false;  // a line over kMaxLine: one error reply, then EOF
};

bool Blank(const std::string& line) {
  std::string l = line;
  if (!l.empty() && l.back() == '\r') l.pop_back();
  return l.find_first_not_of(" \t") == std::string::npos;
}

// The replies owed for `sent`; `at_eof`: the client shut down writing, so
// a last line without a newline counts too.
Owed RepliesOwed(const std::string& sent, bool at_eof) {
  Owed o;
  size_t start = 0;
  while (true) {
    const size_t nl = sent.find('\n', start);
    const size_t end = nl == std::string::npos ? sent.size() : nl;
    if (end - start > ControlServer::kMaxLine) {
      o.refused = true;
      ++o.replies;
      return o;
    }
    if (nl == std::string::npos) {
      if (at_eof && !Blank(sent.substr(start))) ++o.replies;
      return o;
    }
    if (!Blank(sent.substr(start, nl - start))) ++o.replies;
    start = nl + 1;
  }
}

class FuzzClient {
 public:
  explicit FuzzClient(const std::string& path) {
    fd_.Reset(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    path.copy(a.sun_path, sizeof(a.sun_path) - 1);
    FUZZ_CHECK(connect(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) ==
               0);
  }

  // Writes all of `bytes` (reading what comes meanwhile), unless the
  // client shut down or the server ended the connection.
  void Write(const std::string& bytes) {
    if (shut_ || Owes().refused) {
      // After its refusal the server discards the rest: the model stops
      // at the refused line.
      return;
    }
    sent_ += bytes;
    size_t off = 0;
    const absl::Time deadline = absl::Now() + kPatience;
    while (off < bytes.size()) {
      const ssize_t n =
          send(fd_.get(), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      FUZZ_CHECK(n < 0);
      if (errno == EPIPE || errno == ECONNRESET) {
        // Only a refused client's connection ends while it writes.
        FUZZ_CHECK(Owes().refused);
        return;
      }
      FUZZ_CHECK(errno == EAGAIN);
      FUZZ_CHECK(absl::Now() < deadline);  // the server stopped reading
      pollfd p{fd_.get(), POLLIN | POLLOUT, 0};
      poll(&p, 1, 100);
      Read();
    }
    Read();  // replies do not pile up unread
  }

  void Shut() {
    if (shut_) return;
    shutdown(fd_.get(), SHUT_WR);
    shut_ = true;
  }

  // Reads what has come; checks each whole line.
  void Read() {
    char buf[65536];
    while (!eof_) {
      const ssize_t n = read(fd_.get(), buf, sizeof(buf));
      if (n == 0) {
        eof_ = true;
        break;
      }
      if (n < 0) {
        FUZZ_CHECK(errno == EAGAIN || errno == EINTR);
        break;
      }
      in_.append(buf, static_cast<size_t>(n));
    }
    size_t start = 0;
    for (size_t nl; (nl = in_.find('\n', start)) != std::string::npos;
         start = nl + 1) {
      Check(in_.substr(start, nl - start));
    }
    in_.erase(0, start);
  }

  // Waits until every reply owed so far came (and EOF, where it must).
  void Settle(bool to_the_end) {
    const absl::Time deadline = absl::Now() + kPatience;
    while (true) {
      Read();
      const Owed o = Owes();
      FUZZ_CHECK(replies_ <= o.replies);
      const bool want_eof = to_the_end || o.refused;
      if (replies_ == o.replies && (!want_eof || eof_)) break;
      if (eof_) {
        std::fprintf(stderr, "replies %zu of %zu owed, then EOF\n", replies_,
                     o.replies);
      }
      FUZZ_CHECK(!eof_);
      FUZZ_CHECK(absl::Now() < deadline);
      pollfd p{fd_.get(), POLLIN, 0};
      poll(&p, 1, 100);
    }
    FUZZ_CHECK(in_.empty() || !eof_);
  }

  const std::vector<Json>& replies() const { return seen_; }

 private:
  Owed Owes() const { return RepliesOwed(sent_, shut_); }

  void Check(const std::string& line) {
    absl::StatusOr<Json> j = cli::ParseRequestJson(line);
    FUZZ_CHECK(j.ok() && j->is_object());
    if (j->contains("event")) {
      FUZZ_CHECK((*j)["event"].is_string() && j->contains("data"));
      return;
    }
    FUZZ_CHECK(j->contains("ok") && (*j)["ok"].is_boolean());
    if (!(*j)["ok"].get<bool>()) {
      FUZZ_CHECK((*j)["error"]["code"].is_string());
      FUZZ_CHECK((*j)["error"]["message"].is_string());
    }
    ++replies_;
    seen_.push_back(*std::move(j));
  }

  base::OwnedFd fd_;
  std::string sent_;
  std::string in_;
  bool shut_ = false;
  bool eof_ = false;
  size_t replies_ = 0;
  std::vector<Json> seen_;
};

// The session the control steers: its hooks count.
struct FakeSession {
  SessionStats stats;
  size_t aborts = 0;
  std::vector<uint64_t> caps;
  LiveControl::SessionHooks Hooks() {
    return {[this] { return stats; }, [this](const absl::Status&) { ++aborts; },
            [this](uint64_t b) { caps.push_back(b); }};
  }
};

// Whether `r` acknowledges a cancel.
bool IsCancelAck(const Json& r) {
  return r["ok"].get<bool>() && r.contains("result") &&
         r["result"].is_object() && r["result"].contains("cancelled");
}

class Run {
 public:
  Run(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  void Go() {
    if (p_ == end_) return;
    const uint8_t config = *p_++;
    const bool dest = (config & 1) != 0;
    const size_t n = ((config >> 1) & 3) + 1;
    LiveControl control(
        dest ? LiveControl::Role::kDestination : LiveControl::Role::kSource,
        {dest ? uint64_t{0} : uint64_t{100'000'000}, {}},
        {.postcopy = (config & 8) != 0, .throttle = true});
    session_.stats.channels.resize(2);
    session_.stats.channels[0].pages = 100;
    session_.stats.channels[0].payload_bytes = 100 * 4096;
    if ((config & 16) != 0) control.SetSession(session_.Hooks());
    const std::string path =
        absl::StrCat("/tmp/ramferry-fuzz-control-", getpid(), ".sock");
    absl::StatusOr<std::unique_ptr<ControlServer>> server =
        migrate::ServeControl(path, control);
    FUZZ_CHECK(server.ok());
    std::vector<std::unique_ptr<FuzzClient>> clients;
    for (size_t i = 0; i < n; ++i) {
      clients.push_back(std::make_unique<FuzzClient>(path));
    }
    while (p_ != end_) {
      const uint8_t op = *p_++;
      FuzzClient& c = *clients[((op >> 3) & 3) % n];
      switch (op & 7) {
        case 0:
        case 1:
        case 2:
        case 3: {
          const size_t len = std::min<size_t>(Byte(), end_ - p_);
          c.Write(std::string(reinterpret_cast<const char*>(p_), len));
          p_ += len;
          break;
        }
        case 4:
          c.Shut();
          break;
        case 5:
          // What the clients wrote so far is answered first, so the step
          // comes after it, as the properties assume.
          for (auto& each : clients) each->Settle(false);
          Step(control, Byte());
          break;
        case 6: {
          const size_t len = (static_cast<size_t>(Byte()) + 1) * 512;
          c.Write(std::string(len, static_cast<char>(Byte())));
          break;
        }
        default:
          for (auto& each : clients) each->Read();
          break;
      }
      FUZZ_CHECK((*server)->clients() <= n);
    }
    for (auto& c : clients) {
      c->Shut();
      c->Settle(true);
    }
    // A cancel acknowledged before the commit point holds; none after it.
    bool acked = false;
    for (auto& c : clients) {
      for (const Json& r : c->replies()) acked |= IsCancelAck(r);
    }
    if (acked) {
      FUZZ_CHECK(!control.cancelled().ok());
      FUZZ_CHECK(!committed_);
      FUZZ_CHECK(absl::IsCancelled(control.Commit()));
    }
    server->reset();
    control.SetSession({});
  }

 private:
  uint8_t Byte() { return p_ == end_ ? 0 : *p_++; }

  void Step(LiveControl& control, uint8_t what) {
    switch (what % 8) {
      case 0:
        control.SetState(static_cast<MigrationState>((what >> 3) % 8));
        break;
      case 1:
        control.SetSession(session_.Hooks());
        break;
      case 2:
        control.SetSession({});
        break;
      case 3:
        // The commit point: refused after a cancel, then cancel is.
        committed_ |= control.Commit().ok();
        break;
      case 4:
        control.Publish("round-done", Json{{"round", what}});
        break;
      case 5:
        control.UpdateProgress({{"round", what},
                                {"round_pages", 300},
                                {"pages_before_round", what}});
        break;
      case 6:
        control.Finished(
            what & 8 ? absl::OkStatus() : absl::InternalError("fuzzed end"),
            (what & 16) != 0, Json{{"rounds", 1}});
        break;
      default:
        session_.stats.channels[1].pages += what;
        session_.stats.channels[1].payload_bytes += what * 4096;
        break;
    }
  }

  const uint8_t* p_;
  const uint8_t* const end_;
  FakeSession session_;
  bool committed_ = false;
};

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::Run(data, size).Go();
  return 0;
}
