// A unix socket through which other processes drive a running migration:
// an orchestrator, a script, a person with socat. JSON lines, one request
// per line and one reply per line, in order; a client that subscribed
// also gets events between its replies.
//
//   request:  {"cmd": "query", "id": 7, ...arguments}
//   reply:    {"id": 7, "ok": true, "result": {...}}
//        or   {"id": 7, "ok": false,
//              "error": {"code": "INVALID_ARGUMENT", "message": "..."}}
//   event:    {"event": "round-done", "time": 1764.25, "data": {...}}
//
// "id" is optional and echoed as given. "subscribe" is the server's own
// command ({"events": [names]} narrows it, [] to none; all events by
// default); every other command goes to the handler. An empty line (or one
// of blanks) is not a request and gets no reply. A request with a key
// twice, at any depth, is refused.
//
// Who may connect: the socket is created mode 0600, and a peer whose
// uid is neither this process's nor root's is refused (SO_PEERCRED), so
// only whoever could have started the migration can steer it.
//
// Invariants:
// - One thread serves every client (poll(2)); the handler runs on it and
//   must not block.
// - Fair service: each turn of the loop reads at most kReadChunk bytes
//   and answers at most kLinesPerTurn lines of each client, so a client
//   that floods requests delays another by a turn, not by its flood. A
//   client with a whole line unanswered is not read from (its writes
//   wait in the kernel).
// - Every queue is bounded: a client's input by kMaxLine + kReadChunk,
//   its backlog of replies and events by kMaxBacklog, the events not yet
//   handed out by kMaxBacklog bytes (and kMaxPendingEvents).
// - The migration never waits for a client: Publish only queues. A
//   client that lets kMaxBacklog bytes of replies and events pile up
//   unread is overrun: it is dropped at once, without a flush, and none of
//   its later requests runs. So is a subscriber that an event it wanted
//   was dropped for (Publish outran the serving thread).
// - A line longer than kMaxLine bytes (before its newline) is not run: it
//   gets an error line, and so does a client past kMaxClients. Then the
//   server shuts its side for writing and reads and discards what the
//   client still sends until it closes (for at most kDrainTime), so the
//   client can read the error instead of losing it to a reset.
// - A bad request gets an error reply; the connection and the migration
//   go on. A client that disconnects leaves nothing behind.
// - Events published before the server is destroyed reach every
//   subscriber still reading (the destructor flushes for up to 1 s).
#ifndef RAMFERRY_TOOLS_COMMON_CONTROL_SOCKET_H_
#define RAMFERRY_TOOLS_COMMON_CONTROL_SOCKET_H_

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/owned_fd.h"
#include "tools/common/json.h"

namespace ramferry::cli {

class ControlServer {
 public:
  static constexpr size_t kMaxLine = 64 << 10;
  static constexpr size_t kMaxBacklog = 4 << 20;
  static constexpr size_t kMaxClients = 16;
  static constexpr size_t kReadChunk = 16 << 10;
  static constexpr size_t kLinesPerTurn = 16;
  static constexpr size_t kMaxPendingEvents = 4096;
  static constexpr absl::Duration kDrainTime = absl::Seconds(1);

  // Answers one request: `cmd` is its "cmd", `request` the whole object.
  // An error status becomes the error reply.
  using Handler = std::function<absl::StatusOr<Json>(absl::string_view cmd,
                                                     const Json& request)>;

  // Listens on `path` and serves until destroyed. `events` names what
  // Publish may send (what "subscribe" accepts). A stale socket at `path`
  // (nothing listens) is replaced; a live one, or a file that is not a
  // socket, is refused.
  static absl::StatusOr<std::unique_ptr<ControlServer>> Start(
      const std::string& path, std::vector<std::string> events,
      Handler handler);
  ~ControlServer();

  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Sends `event` with `data` to every subscriber of it. Any thread;
  // never blocks on a client.
  void Publish(absl::string_view event, Json data);

  const std::string& path() const { return path_; }
  // Clients connected now (for tests and the report).
  size_t clients() const { return clients_now_.load(); }

 private:
  struct Client;

  ControlServer(std::string path, base::OwnedFd listener, base::OwnedFd wake,
                std::vector<std::string> events, Handler handler);
  void Serve();
  void Accept();
  // One read of at most kReadChunk from `c`; false: drop it. A closing
  // client's bytes are discarded.
  bool ReadFrom(Client& c);
  // Answers up to kLinesPerTurn whole lines of `c`'s input; at its EOF,
  // the last line too, then closes it.
  void AnswerLines(Client& c);
  // Whether `c` holds a whole line not yet answered.
  static bool HasLine(const Client& c);
  // Queues the error `why` for `c` and closes it (see the invariants).
  static void Refuse(Client& c, const absl::Status& why);
  // After a flush: whether `c` is done and may be dropped; shuts down its
  // writing side and starts the drain once its backlog is out.
  static bool Finished(Client& c, absl::Time now);
  void Answer(Client& c, absl::string_view line);
  absl::StatusOr<Json> Subscribe(Client& c, const Json& request);
  // Appends `line` to `c`'s backlog; false: over kMaxBacklog.
  static bool Queue(Client& c, const std::string& line);
  // Writes what the socket takes now; false: the client is gone.
  static bool Flush(Client& c);
  void DeliverEvents();
  void FlushBeforeClosing();

  const std::string path_;
  const base::OwnedFd listener_;
  const base::OwnedFd wake_;  // eventfd: Publish and the destructor
  const std::vector<std::string> events_;
  const Handler handler_;
  std::vector<std::unique_ptr<Client>> clients_;  // the serving thread's
  std::atomic<size_t> clients_now_{0};
  std::atomic<bool> stop_{false};

  std::mutex mu_;
  // (event name, its line) not yet handed to the clients, their bytes, and
  // the names of events dropped from it (the oldest go first); guarded by
  // mu_.
  std::deque<std::pair<std::string, std::string>> pending_;
  size_t pending_bytes_ = 0;
  std::vector<std::string> lost_;

  std::thread thread_;
};

}  // namespace ramferry::cli

#endif  // RAMFERRY_TOOLS_COMMON_CONTROL_SOCKET_H_
