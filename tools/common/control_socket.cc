#include "tools/common/control_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"
#include "base/status_macros.h"
#include "tools/common/unix_socket.h"

namespace ramferry::cli {

struct ControlServer::Client {
  base::OwnedFd fd;
  std::string in;
  size_t scanned = 0;  // in[0, scanned) holds no newline
  std::string out;     // the backlog: replies and events not yet written
  bool subscribed = false;
  bool all_events = true;           // else only `events`
  std::vector<std::string> events;  // what a narrowed subscription gets
  bool counted = true;  // one of the kMaxClients (not a refused one)
  bool eof = false;     // the client sent all it will send
  // No more requests: flush what is queued, shut down writing, discard
  // what the client still sends until its EOF or `drain_until`, drop.
  bool closing = false;
  bool shut = false;  // shutdown(SHUT_WR) done
  absl::Time drain_until = absl::InfiniteFuture();
  bool overrun = false;  // kMaxBacklog unread: dropped without a flush
};

namespace {

Json ErrorReply(const absl::Status& s) {
  return Json{{"ok", false},
              {"error",
               {{"code", absl::StatusCodeToString(s.code())},
                {"message", std::string(s.message())}}}};
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControlServer>> ControlServer::Start(
    const std::string& path, std::vector<std::string> events, Handler handler) {
  RAMFERRY_ASSIGN_OR_RETURN(base::OwnedFd fd, ListenUnix(path, "control socket",
                                                         /*nonblocking=*/true));
  base::OwnedFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    unlink(path.c_str());
    return base::ErrnoStatus(errno, "eventfd");
  }
  return std::unique_ptr<ControlServer>(
      new ControlServer(path, std::move(fd), std::move(wake), std::move(events),
                        std::move(handler)));
}

ControlServer::ControlServer(std::string path, base::OwnedFd listener,
                             base::OwnedFd wake,
                             std::vector<std::string> events, Handler handler)
    : path_(std::move(path)),
      listener_(std::move(listener)),
      wake_(std::move(wake)),
      events_(std::move(events)),
      handler_(std::move(handler)) {
  thread_ = std::thread([this] { Serve(); });
}

ControlServer::~ControlServer() {
  stop_.store(true);
  const uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
  thread_.join();
  unlink(path_.c_str());
}

void ControlServer::Publish(absl::string_view event, Json data) {
  Json e{{"event", std::string(event)},
         {"time", absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch())},
         {"data", std::move(data)}};
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.emplace_back(std::string(event), DumpJson(e) + "\n");
    pending_bytes_ += pending_.back().second.size();
    // The serving thread is this far behind: the oldest events go, and
    // whoever wanted them is told by being let go (DeliverEvents).
    while (pending_.size() > 1 && (pending_bytes_ > kMaxBacklog ||
                                   pending_.size() > kMaxPendingEvents)) {
      pending_bytes_ -= pending_.front().second.size();
      if (std::find(lost_.begin(), lost_.end(), pending_.front().first) ==
          lost_.end()) {
        lost_.push_back(pending_.front().first);
      }
      pending_.pop_front();
    }
  }
  const uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
}

void ControlServer::Serve() {
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    fds.push_back({listener_.get(), POLLIN, 0});
    // Lines already read and not answered: poll only to see what else is
    // ready, then answer the next of them.
    bool busy = false;
    absl::Time wake_at = absl::InfiniteFuture();
    for (const auto& c : clients_) {
      const bool has_line = !c->closing && HasLine(*c);
      busy |= has_line || (!c->closing && c->eof);
      if (c->shut) wake_at = std::min(wake_at, c->drain_until);
      const bool read = !c->eof && !has_line;
      const short want = static_cast<short>((read ? POLLIN : 0) |
                                            (c->out.empty() ? 0 : POLLOUT));
      fds.push_back({c->fd.get(), want, 0});
    }
    int timeout = -1;
    if (busy) {
      timeout = 0;
    } else if (wake_at != absl::InfiniteFuture()) {
      timeout = static_cast<int>(std::max<int64_t>(
          0, absl::ToInt64Milliseconds(wake_at - absl::Now()) + 1));
    }
    if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) {
      uint64_t n;
      (void)!read(wake_.get(), &n, sizeof(n));
    }
    DeliverEvents();
    // Clients accepted below have no pollfd yet: only the first ones do.
    const size_t polled = fds.size() - 2;
    const absl::Time now = absl::Now();
    std::vector<bool> drop(clients_.size(), false);
    for (size_t i = 0; i < polled; ++i) {
      Client& c = *clients_[i];
      const short ev = fds[i + 2].revents;
      // Only a client polled for input is read (a hang-up is reported
      // whatever was asked).
      if ((fds[i + 2].events & POLLIN) != 0 &&
          (ev & (POLLIN | POLLHUP | POLLERR)) != 0 && !ReadFrom(c)) {
        drop[i] = true;
        continue;
      }
      if (!c.closing) AnswerLines(c);
      if (c.overrun || !Flush(c) || Finished(c, now)) drop[i] = true;
    }
    for (size_t i = clients_.size(); i-- > 0;) {
      if (drop[i]) clients_.erase(clients_.begin() + i);
    }
    if (fds[1].revents != 0) Accept();
    clients_now_.store(std::count_if(clients_.begin(), clients_.end(),
                                     [](const auto& c) { return c->counted; }));
  }
  DeliverEvents();
  FlushBeforeClosing();
  clients_.clear();
  clients_now_.store(0);
}

bool ControlServer::Finished(Client& c, absl::Time now) {
  if (!c.closing || !c.out.empty()) return false;
  if (c.eof) return true;
  if (!c.shut) {
    // The client reads its last line and then EOF; what it still sends
    // is read and discarded, so it is not reset mid-write.
    shutdown(c.fd.get(), SHUT_WR);
    c.shut = true;
    c.drain_until = now + kDrainTime;
    return false;
  }
  return now >= c.drain_until;
}

void ControlServer::Accept() {
  while (true) {
    base::OwnedFd fd(accept4(listener_.get(), nullptr, nullptr,
                             SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) return;  // EAGAIN, or a connection that went away
    auto c = std::make_unique<Client>();
    c->fd = std::move(fd);
    ucred cred{};
    socklen_t len = sizeof(cred);
    absl::Status refused;
    const size_t counted =
        std::count_if(clients_.begin(), clients_.end(),
                      [](const auto& other) { return other->counted; });
    if (getsockopt(c->fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      refused = base::ErrnoStatus(errno, "SO_PEERCRED");
    } else if (cred.uid != 0 && cred.uid != geteuid()) {
      refused = absl::PermissionDeniedError(absl::StrCat(
          "uid ", cred.uid, " may not control this migration (only uid ",
          geteuid(), " or root)"));
    } else if (counted >= kMaxClients) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          "already ", kMaxClients, " control clients: close one first"));
    }
    if (!refused.ok()) {
      c->counted = false;
      Refuse(*c, refused);
      // At most kMaxClients refused ones are held to be drained; past
      // that, the refusal is one short line into an empty buffer, best
      // effort.
      if (clients_.size() - counted >= kMaxClients) {
        (void)!send(c->fd.get(), c->out.data(), c->out.size(), MSG_NOSIGNAL);
        continue;
      }
    }
    clients_.push_back(std::move(c));
  }
}

bool ControlServer::ReadFrom(Client& c) {
  char buf[kReadChunk];
  const ssize_t n = read(c.fd.get(), buf, sizeof(buf));
  if (n == 0) {
    // The client is done sending (socat, nc): its lines are answered,
    // a last one without a newline too, then it is closed.
    c.eof = true;
    return true;
  }
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  if (!c.closing) c.in.append(buf, static_cast<size_t>(n));
  return true;
}

bool ControlServer::HasLine(const Client& c) {
  return c.in.find('\n', c.scanned) != std::string::npos;
}

void ControlServer::Refuse(Client& c, const absl::Status& why) {
  // Past a backlog this full, the client is not reading anyway.
  if (!Queue(c, DumpJson(ErrorReply(why)) + "\n")) c.overrun = true;
  c.closing = true;
  c.in.clear();
  c.scanned = 0;
}

void ControlServer::AnswerLines(Client& c) {
  size_t start = 0;
  for (size_t answered = 0;
       answered < kLinesPerTurn && !c.closing && !c.overrun; ++answered) {
    const size_t nl = c.in.find('\n', std::max(start, c.scanned));
    if (nl == std::string::npos) break;
    if (nl - start > kMaxLine) break;  // refused below
    Answer(c, absl::string_view(c.in).substr(start, nl - start));
    start = nl + 1;
  }
  if (c.closing || c.overrun) return;
  c.in.erase(0, start);
  c.scanned = start > c.scanned ? 0 : c.scanned - start;
  const size_t nl = c.in.find('\n', c.scanned);
  c.scanned = nl == std::string::npos ? c.in.size() : c.scanned;
  // The line at the front, whole or not, is over the limit: it is not
  // run, whatever follows it.
  if ((nl == std::string::npos ? c.in.size() : nl) > kMaxLine) {
    Refuse(c, absl::InvalidArgumentError(
                  absl::StrCat("request line longer than ", kMaxLine,
                               " bytes: closing the connection")));
    return;
  }
  if (c.eof && nl == std::string::npos) {
    // A last line without a newline is answered too.
    if (!c.in.empty()) Answer(c, c.in);
    c.in.clear();
    c.scanned = 0;
    c.closing = true;
  }
}

void ControlServer::Answer(Client& c, absl::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // Not a request: no reply (docs/control.md).
  if (line.find_first_not_of(" \t") == absl::string_view::npos) return;
  absl::StatusOr<Json> parsed = ParseRequestJson(line);
  absl::StatusOr<Json> result;
  Json reply;
  if (!parsed.ok()) {
    result = parsed.status();
  } else if (!parsed->is_object()) {
    result = absl::InvalidArgumentError(
        "a request is one JSON object per line, such as {\"cmd\": "
        "\"query\"}");
  } else {
    const Json& request = *parsed;
    if (request.contains("id")) reply["id"] = request["id"];
    const auto cmd = request.find("cmd");
    if (cmd == request.end() || !cmd->is_string()) {
      result = absl::InvalidArgumentError(
          "the request has no \"cmd\" string (query, set, start-postcopy, "
          "cancel, subscribe)");
    } else if (*cmd == "subscribe") {
      result = Subscribe(c, request);
    } else {
      // Reading a field as the wrong type throws in nlohmann::json: the
      // request was bad, not the server.
      try {
        result = handler_(cmd->get<std::string>(), request);
      } catch (const Json::exception& e) {
        result = absl::InvalidArgumentError(e.what());
      }
    }
  }
  if (result.ok()) {
    reply["ok"] = true;
    reply["result"] = *std::move(result);
  } else {
    reply.update(ErrorReply(result.status()));
  }
  if (!Queue(c, DumpJson(reply) + "\n")) c.overrun = true;
}

absl::StatusOr<Json> ControlServer::Subscribe(Client& c, const Json& request) {
  std::vector<std::string> wanted;
  if (const auto e = request.find("events"); e != request.end()) {
    if (!e->is_array()) {
      return absl::InvalidArgumentError("\"events\" is a list of event names");
    }
    for (const Json& name : *e) {
      if (!name.is_string() ||
          std::find(events_.begin(), events_.end(), name) == events_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("no event ", name.dump(), "; the events are ",
                         absl::StrJoin(events_, ", ")));
      }
      wanted.push_back(name.get<std::string>());
    }
  }
  c.subscribed = true;
  // "events": [] asks for none (a way to stop them); no "events", all.
  c.all_events = request.find("events") == request.end();
  c.events = std::move(wanted);
  return Json{{"events", c.all_events ? events_ : c.events}};
}

bool ControlServer::Queue(Client& c, const std::string& line) {
  if (c.out.size() + line.size() > kMaxBacklog) return false;
  c.out += line;
  return true;
}

bool ControlServer::Flush(Client& c) {
  while (!c.out.empty()) {
    const ssize_t n = send(c.fd.get(), c.out.data(), c.out.size(),
                           MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    c.out.erase(0, static_cast<size_t>(n));
  }
  return true;
}

void ControlServer::DeliverEvents() {
  std::deque<std::pair<std::string, std::string>> events;
  std::vector<std::string> lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events.swap(pending_);
    lost.swap(lost_);
    pending_bytes_ = 0;
  }
  auto wants = [](const Client& c, const std::string& name) {
    return c.subscribed && !c.closing && !c.overrun &&
           (c.all_events || std::find(c.events.begin(), c.events.end(), name) !=
                                c.events.end());
  };
  // A subscriber that missed an event it wanted is let go rather than
  // left to believe it saw every one.
  for (const std::string& name : lost) {
    for (const auto& c : clients_) {
      if (wants(*c, name)) c->overrun = true;
    }
  }
  for (const auto& [name, line] : events) {
    for (const auto& c : clients_) {
      if (!wants(*c, name)) continue;
      // A subscriber this far behind is not reading: it is let go rather
      // than let the backlog grow without bound.
      if (!Queue(*c, line)) c->overrun = true;
    }
  }
}

void ControlServer::FlushBeforeClosing() {
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  while (absl::Now() < deadline) {
    std::vector<pollfd> fds;
    for (const auto& c : clients_) {
      if (!c->out.empty()) fds.push_back({c->fd.get(), POLLOUT, 0});
    }
    if (fds.empty()) return;
    poll(fds.data(), fds.size(),
         static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now())) +
             1);
    for (const auto& c : clients_) {
      if (!Flush(*c)) c->out.clear();
    }
  }
}

}  // namespace ramferry::cli
