#include "tools/common/control_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/owned_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::cli {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/ctl-", getpid(), "-", name);
}

// A client that reads whole lines, with a deadline.
class LineClient {
 public:
  explicit LineClient(const std::string& path) {
    fd_.Reset(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    path.copy(a.sun_path, sizeof(a.sun_path) - 1);
    connected_ =
        connect(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  bool connected() const { return connected_; }
  void Send(const std::string& text) {
    ASSERT_EQ(send(fd_.get(), text.data(), text.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(text.size()));
  }
  // The next line, or "" at EOF or after `wait`.
  std::string Line(absl::Duration wait = absl::Seconds(30)) {
    const absl::Time deadline = absl::Now() + wait;
    while (true) {
      if (const size_t nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      pollfd p{fd_.get(), POLLIN, 0};
      const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (ms <= 0 || poll(&p, 1, static_cast<int>(ms)) <= 0) return "";
      char chunk[65536];
      const ssize_t n = read(fd_.get(), chunk, sizeof(chunk));
      if (n <= 0) {
        eof_ = n == 0;
        return "";
      }
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }
  Json Reply(absl::Duration wait = absl::Seconds(30)) {
    const std::string line = Line(wait);
    if (line.empty()) return Json();
    return Json::parse(line);
  }
  int fd() const { return fd_.get(); }
  bool eof() const { return eof_; }  // the server closed its side

 private:
  base::OwnedFd fd_;
  bool connected_ = false;
  bool eof_ = false;
  std::string buf_;
};

ControlServer::Handler EchoHandler() {
  return
      [](absl::string_view cmd, const Json& request) -> absl::StatusOr<Json> {
        if (cmd == "fail")
          return absl::FailedPreconditionError("asked to fail");
        if (cmd == "typed") return Json{{"n", request.at("n").get<int>()}};
        return Json{{"echo", std::string(cmd)}};
      };
}

std::unique_ptr<ControlServer> Serve(const std::string& path,
                                     std::vector<std::string> events = {"a",
                                                                        "b"}) {
  absl::StatusOr<std::unique_ptr<ControlServer>> s =
      ControlServer::Start(path, std::move(events), EchoHandler());
  EXPECT_OK(s);
  return s.ok() ? *std::move(s) : nullptr;
}

TEST(ControlServer, AnswersEveryLineInOrderAndEchoesTheId) {
  const std::string path = TempPath("order");
  std::unique_ptr<ControlServer> server = Serve(path);
  ASSERT_NE(server, nullptr);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  LineClient c(path);
  ASSERT_TRUE(c.connected());
  c.Send("{\"cmd\":\"one\",\"id\":1}\n{\"cmd\":\"two\",\"id\":\"x\"}\r\n\n");
  Json r1 = c.Reply();
  Json r2 = c.Reply();
  EXPECT_EQ(r1["id"], 1);
  EXPECT_EQ(r1["result"]["echo"], "one");
  EXPECT_EQ(r2["id"], "x");
  EXPECT_EQ(r2["result"]["echo"], "two");
  c.Send("{\"cmd\":\"fail\"}\n");
  Json r3 = c.Reply();
  EXPECT_EQ(r3["ok"], false);
  EXPECT_EQ(r3["error"]["code"], "FAILED_PRECONDITION");
  EXPECT_EQ(r3["error"]["message"], "asked to fail");
}

TEST(ControlServer, BadRequestsGetErrorsAndTheConnectionGoesOn) {
  const std::string path = TempPath("bad");
  std::unique_ptr<ControlServer> server = Serve(path);
  ASSERT_NE(server, nullptr);
  LineClient c(path);
  for (const char* bad :
       {"not json", "[1]", "{\"id\": 3}", "{\"cmd\": 5}",
        "{\"cmd\": \"typed\", \"n\": \"seven\"}", "{\"cmd\": \"typed\"}"}) {
    c.Send(absl::StrCat(bad, "\n"));
    Json r = c.Reply();
    EXPECT_EQ(r["ok"], false) << bad;
    EXPECT_EQ(r["error"]["code"], "INVALID_ARGUMENT") << bad;
  }
  c.Send("{\"cmd\": \"typed\", \"n\": 7}\n");
  EXPECT_EQ(c.Reply()["result"]["n"], 7);
}

TEST(ControlServer, ALastLineWithoutNewlineIsAnsweredAtEof) {
  const std::string path = TempPath("eof");
  std::unique_ptr<ControlServer> server = Serve(path);
  ASSERT_NE(server, nullptr);
  LineClient c(path);
  c.Send("{\"cmd\": \"last\"}");
  shutdown(c.fd(), SHUT_WR);
  EXPECT_EQ(c.Reply()["result"]["echo"], "last");
  EXPECT_EQ(c.Line(), "");  // then closed
}

TEST(ControlServer, SubscribersGetTheirEventsOthersNone) {
  const std::string path = TempPath("events");
  std::unique_ptr<ControlServer> server = Serve(path);
  ASSERT_NE(server, nullptr);
  LineClient all(path), only_b(path), none(path);
  all.Send("{\"cmd\": \"subscribe\"}\n");
  EXPECT_EQ(all.Reply()["result"]["events"], Json({"a", "b"}));
  only_b.Send("{\"cmd\": \"subscribe\", \"events\": [\"b\"]}\n");
  EXPECT_EQ(only_b.Reply()["ok"], true);
  only_b.Send("{\"cmd\": \"subscribe\", \"events\": [\"c\"]}\n");
  EXPECT_THAT(only_b.Reply()["error"]["message"].get<std::string>(),
              HasSubstr("no event \"c\""));
  server->Publish("a", Json{{"n", 1}});
  server->Publish("b", Json{{"n", 2}});
  Json e1 = all.Reply(), e2 = all.Reply();
  EXPECT_EQ(e1["event"], "a");
  EXPECT_EQ(e1["data"]["n"], 1);
  EXPECT_TRUE(e1["time"].is_number());
  EXPECT_EQ(e2["event"], "b");
  Json b = only_b.Reply();
  EXPECT_EQ(b["event"], "b");
  // Nothing came before the reply to this.
  none.Send("{\"cmd\": \"q\"}\n");
  EXPECT_EQ(none.Reply()["result"]["echo"], "q");
}

TEST(ControlServer, ASubscriberThatDoesNotReadIsLetGoNotWaitedFor) {
  const std::string path = TempPath("slow");
  std::unique_ptr<ControlServer> server = Serve(path);
  ASSERT_NE(server, nullptr);
  LineClient slow(path);
  slow.Send("{\"cmd\": \"subscribe\"}\n");
  ASSERT_EQ(slow.Reply()["ok"], true);
  // More than the socket's buffer and kMaxBacklog together: a Publish
  // that waited for this reader would never return (the test would hang
  // to its timeout), where the server lets the reader go.
  const std::string blob(64 << 10, 'x');
  const size_t events = ControlServer::kMaxBacklog / blob.size() + 32;
  for (size_t i = 0; i < events; ++i) {
    server->Publish("a", Json{{"blob", blob}});
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (server->clients() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(server->clients(), 0u);
}

TEST(ControlServer, AnOverlongLineIsRefusedAndClosed) {
  const std::string path = TempPath("long");
  std::unique_ptr<ControlServer> server = Serve(path);
  ASSERT_NE(server, nullptr);
  LineClient c(path);
  c.Send(std::string(ControlServer::kMaxLine + 10, 'y'));
  Json r = c.Reply();
  EXPECT_THAT(r["error"]["message"].get<std::string>(),
              HasSubstr("longer than"));
  EXPECT_EQ(c.Line(), "");
}

TEST(ControlServer, RefusesClientsPastTheLimit) {
  const std::string path = TempPath("many");
  std::unique_ptr<ControlServer> server = Serve(path);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<LineClient>> clients;
  for (size_t i = 0; i < ControlServer::kMaxClients; ++i) {
    clients.push_back(std::make_unique<LineClient>(path));
    clients.back()->Send("{\"cmd\": \"q\"}\n");
    ASSERT_EQ(clients.back()->Reply()["ok"], true);
  }
  LineClient extra(path);
  EXPECT_EQ(extra.Reply()["error"]["code"], "RESOURCE_EXHAUSTED");
  clients.pop_back();  // one leaves: room for another
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (server->clients() >= ControlServer::kMaxClients &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  LineClient next(path);
  next.Send("{\"cmd\": \"q\"}\n");
  EXPECT_EQ(next.Reply()["ok"], true);
}

TEST(ControlServer, ReplacesAStaleSocketRefusesALiveOneAndOtherFiles) {
  const std::string path = TempPath("stale");
  {
    std::unique_ptr<ControlServer> live = Serve(path);
    ASSERT_NE(live, nullptr);
    absl::StatusOr<std::unique_ptr<ControlServer>> second =
        ControlServer::Start(path, {}, EchoHandler());
    EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
    EXPECT_THAT(second.status().message(), HasSubstr("another process"));
  }
  // A socket left behind by a process that died: nobody listens.
  {
    base::OwnedFd fd(socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    path.copy(a.sun_path, sizeof(a.sun_path) - 1);
    ASSERT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  }
  EXPECT_NE(Serve(path), nullptr);
  std::ofstream(path) << "a file";
  absl::StatusOr<std::unique_ptr<ControlServer>> on_file =
      ControlServer::Start(path, {}, EchoHandler());
  EXPECT_EQ(on_file.status().code(), absl::StatusCode::kFailedPrecondition);
  unlink(path.c_str());
  EXPECT_EQ(ControlServer::Start(std::string(200, 'p'), {}, EchoHandler())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ControlServer, EventsPublishedBeforeTheEndReachSubscribers) {
  const std::string path = TempPath("end");
  std::unique_ptr<ControlServer> server = Serve(path);
  ASSERT_NE(server, nullptr);
  LineClient c(path);
  c.Send("{\"cmd\": \"subscribe\"}\n");
  ASSERT_EQ(c.Reply()["ok"], true);
  server->Publish("b", Json{{"last", true}});
  server.reset();
  EXPECT_EQ(c.Reply()["data"]["last"], true);
  EXPECT_EQ(c.Line(), "");
  struct stat st;
  EXPECT_NE(stat(path.c_str(), &st), 0);  // removed
}

// A handler that counts what it ran, and can be held: "hold" blocks the
// serving thread until Release(), so a test can line up what clients
// sent before the server looks at any of it.
class CountingHandler {
 public:
  ControlServer::Handler Handler() {
    return [this](absl::string_view cmd, const Json&) -> absl::StatusOr<Json> {
      if (cmd == "hold") {
        held_.Notify();
        release_.WaitForNotification();
        return Json::object();
      }
      if (cmd == "big") {
        ++ran_;
        return Json{{"blob", std::string(64 << 10, 'z')}};
      }
      if (cmd == "b") return Json{{"a_ran", ran_.load()}};
      ++ran_;
      return Json{{"ran", ran_.load()}};
    };
  }
  void WaitHeld() { held_.WaitForNotification(); }
  void Release() { release_.Notify(); }
  size_t ran() const { return ran_.load(); }

 private:
  absl::Notification held_, release_;
  std::atomic<size_t> ran_{0};
};

std::unique_ptr<ControlServer> Serve(const std::string& path,
                                     CountingHandler& h) {
  absl::StatusOr<std::unique_ptr<ControlServer>> s =
      ControlServer::Start(path, {"a", "b"}, h.Handler());
  EXPECT_OK(s);
  return s.ok() ? *std::move(s) : nullptr;
}

// Waits (bounded) until the server holds `n` clients.
void WaitClients(const ControlServer& server, size_t n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (server.clients() != n && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
}

TEST(ControlServer, AFloodingClientDoesNotMakeAnotherWaitForItsFlood) {
  const std::string path = TempPath("fair");
  CountingHandler h;
  std::unique_ptr<ControlServer> server = Serve(path, h);
  ASSERT_NE(server, nullptr);
  LineClient a(path), b(path);
  WaitClients(*server, 2);
  // While the server is held, A queues 2000 requests (32 KB: the socket
  // buffer takes them) and then B one. Served fairly, B's reply comes
  // after a turn of A's, not after all of them.
  a.Send("{\"cmd\":\"hold\"}\n");
  h.WaitHeld();
  std::string flood;
  for (int i = 0; i < 2000; ++i) flood += "{\"cmd\":\"a\"}\n";
  a.Send(flood);
  b.Send("{\"cmd\":\"b\"}\n");
  h.Release();
  const Json r = b.Reply();
  ASSERT_EQ(r["ok"], true) << r.dump();
  EXPECT_LT(r["result"]["a_ran"].get<size_t>(), 200u);
}

TEST(ControlServer, AnOverrunClientIsDroppedAndRunsNothingMore) {
  const std::string path = TempPath("overrun");
  CountingHandler h;
  std::unique_ptr<ControlServer> server = Serve(path, h);
  ASSERT_NE(server, nullptr);
  LineClient a(path);
  WaitClients(*server, 1);
  // 400 requests for 64 KiB replies, never read: 25 MiB of replies where
  // the backlog holds 4 MiB (and the socket some more). Once overrun, the
  // client is gone and the rest of its requests never run.
  a.Send("{\"cmd\":\"hold\"}\n");
  h.WaitHeld();
  std::string flood;
  for (int i = 0; i < 400; ++i) flood += "{\"cmd\":\"big\"}\n";
  a.Send(flood);
  h.Release();
  WaitClients(*server, 0);
  EXPECT_EQ(server->clients(), 0u);
  EXPECT_LT(h.ran(), 200u);
}

TEST(ControlServer, EventsThePublisherOutranAreNotSilentlyLost) {
  const std::string path = TempPath("pending");
  CountingHandler h;
  std::unique_ptr<ControlServer> server = Serve(path, h);
  ASSERT_NE(server, nullptr);
  LineClient sub(path), other(path), holder(path);
  sub.Send("{\"cmd\":\"subscribe\",\"events\":[\"a\"]}\n");
  ASSERT_EQ(sub.Reply()["ok"], true);
  other.Send("{\"cmd\":\"subscribe\",\"events\":[\"b\"]}\n");
  ASSERT_EQ(other.Reply()["ok"], true);
  // The serving thread held: more (small) events than the queue keeps
  // pile up; the oldest are dropped.
  holder.Send("{\"cmd\":\"hold\"}\n");
  h.WaitHeld();
  const size_t published = ControlServer::kMaxPendingEvents + 100;
  for (size_t i = 0; i < published; ++i) {
    server->Publish("a", Json{{"n", i}});
  }
  server->Publish("b", Json{{"n", 1}});
  h.Release();
  // A subscriber to what was dropped is let go (EOF), not left to believe
  // it saw every event; one whose events all got through goes on.
  size_t lines = 0;
  while (!sub.Line(absl::Seconds(10)).empty()) ++lines;
  EXPECT_TRUE(sub.eof());
  EXPECT_LT(lines, published);
  EXPECT_EQ(other.Reply()["data"]["n"], 1);
}

TEST(ControlServer, ALineOverTheLimitIsNotRunAndItsErrorCanBeRead) {
  const std::string path = TempPath("exact");
  CountingHandler h;
  std::unique_ptr<ControlServer> server = Serve(path, h);
  ASSERT_NE(server, nullptr);
  // A request padded to exactly kMaxLine bytes runs.
  const std::string head = "{\"cmd\":\"a\",\"pad\":\"";
  const std::string tail = "\"}";
  auto padded = [&](size_t bytes) {
    return head + std::string(bytes - head.size() - tail.size(), 'p') + tail;
  };
  LineClient ok(path);
  ok.Send(padded(ControlServer::kMaxLine) + "\n");
  EXPECT_EQ(ok.Reply()["ok"], true);
  EXPECT_EQ(h.ran(), 1u);
  // One byte more does not, though its newline came in the same write.
  LineClient over(path);
  over.Send(padded(ControlServer::kMaxLine + 1) + "\n");
  Json r = over.Reply();
  EXPECT_EQ(r["error"]["code"], "INVALID_ARGUMENT");
  EXPECT_THAT(r["error"]["message"].get<std::string>(),
              HasSubstr("longer than 65536 bytes"));
  EXPECT_EQ(over.Line(), "");
  EXPECT_EQ(h.ran(), 1u);
  // 256 KiB, more than the server reads before it refuses and more than
  // the socket holds: the whole write goes through (a blocking send that
  // a closed server would fail with EPIPE or ECONNRESET), then the error
  // is there to read.
  LineClient huge(path);
  huge.Send(padded(256 << 10) + "\n{\"cmd\":\"a\"}\n");
  r = huge.Reply();
  EXPECT_EQ(r["error"]["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(huge.Line(), "");
  EXPECT_EQ(h.ran(), 1u);
}

TEST(ControlServer, AClientPastTheLimitCanWriteAndThenReadItsRefusal) {
  const std::string path = TempPath("refused");
  CountingHandler h;
  std::unique_ptr<ControlServer> server = Serve(path, h);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<LineClient>> clients;
  for (size_t i = 0; i < ControlServer::kMaxClients; ++i) {
    clients.push_back(std::make_unique<LineClient>(path));
  }
  WaitClients(*server, ControlServer::kMaxClients);
  LineClient extra(path);
  ASSERT_TRUE(extra.connected());
  // The server is done writing to it (the refusal is in) before the
  // client's first request goes out.
  pollfd p{extra.fd(), POLLRDHUP, 0};
  ASSERT_EQ(poll(&p, 1, 30000), 1);
  extra.Send("{\"cmd\":\"a\"}\n");
  EXPECT_EQ(extra.Reply()["error"]["code"], "RESOURCE_EXHAUSTED");
  EXPECT_EQ(extra.Line(), "");
  EXPECT_EQ(h.ran(), 0u);
}

TEST(ControlServer, AKeyGivenTwiceAtAnyDepthIsRefused) {
  const std::string path = TempPath("dup");
  CountingHandler h;
  std::unique_ptr<ControlServer> server = Serve(path, h);
  ASSERT_NE(server, nullptr);
  LineClient c(path);
  for (const char* dup :
       {"{\"cmd\":\"b\",\"cmd\":\"a\"}", "{\"cmd\":\"a\",\"c\\u006dd\":\"a\"}",
        "{\"cmd\":\"a\",\"x\":[{\"k\":1,\"k\":2}]}",
        "{\"cmd\":\"a\",\"x\":{\"y\":{\"k\":1,\"j\":{},\"k\":2}}}"}) {
    c.Send(absl::StrCat(dup, "\n"));
    Json r = c.Reply();
    EXPECT_EQ(r["error"]["code"], "INVALID_ARGUMENT") << dup;
    EXPECT_THAT(r["error"]["message"].get<std::string>(),
                HasSubstr("appears twice"))
        << dup;
  }
  EXPECT_EQ(h.ran(), 0u);
  // The same key in sibling objects is no duplicate.
  c.Send("{\"cmd\":\"a\",\"x\":[{\"k\":1},{\"k\":2}],\"y\":{\"k\":3}}\n");
  EXPECT_EQ(c.Reply()["ok"], true);
}

TEST(ControlServer, AnEmptyEventListSubscribesToNone) {
  const std::string path = TempPath("none");
  std::unique_ptr<ControlServer> server = Serve(path);
  ASSERT_NE(server, nullptr);
  LineClient c(path);
  c.Send("{\"cmd\": \"subscribe\", \"events\": []}\n");
  EXPECT_EQ(c.Reply()["result"]["events"], Json::array());
  server->Publish("a", Json{{"n", 1}});
  c.Send("{\"cmd\": \"q\"}\n");
  EXPECT_EQ(c.Reply()["result"]["echo"], "q");
  // Blank lines are no requests: no reply to them.
  c.Send("\n \t\r\n{\"cmd\": \"r\"}\n");
  EXPECT_EQ(c.Reply()["result"]["echo"], "r");
}

}  // namespace
}  // namespace ramferry::cli
