// Failure in post-copy, the dangerous case: each side holds part of the
// state. Kills and resets at random points of CompletePostcopy, both
// directions, on loopback: both ends must return an error within a bound
// (a watchdog fails the test on a hang), nothing may report success, the
// source's memory must be unchanged (it keeps its copy), the destination
// must still await pages, and its faulting threads must stay blocked, not
// corrupted, until Receiver::ReleasePostcopy (after which they run on and
// read zeros for the pages never placed). Also a source that stalls
// (SIGSTOP: stops sending without closing): the destination ends the
// session after the stall timeout.
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "channels/socket_dial.h"
#include "engine/control.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/control.h"
#include "proto/handshake.h"
#include "proto/postcopy.h"
#include "proto/wire.h"
#include "ramferry/receiver.h"
#include "ramferry/sender.h"
#include "tests/support/child_peers.h"
#include "tests/support/fake_source.h"
#include "tests/support/faulty_transport.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/uffd_skip.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::AnyOf;
using testing::FaultInjector;
using testing::FaultKind;
using testing::FaultOp;
using ::testing::HasSubstr;
using testing::MakeRegion;
using testing::ServingReceiver;

// Why this machine cannot give the test a userfaultfd, or "" if it can.

// Fails the test (ends the process, which ctest reports) if not disarmed
// within `bound`: a hang must not pass as a slow success.
class Watchdog {
 public:
  Watchdog(absl::Duration bound, std::string what)
      : what_(std::move(what)), thread_([this, bound] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, absl::ToChronoSeconds(bound),
                            [&] { return disarmed_; })) {
            std::fprintf(stderr, "WATCHDOG: %s did not end within %s: a hang\n",
                         what_.c_str(), absl::FormatDuration(bound).c_str());
            std::fflush(stderr);
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      disarmed_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  const std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread thread_;
};

// Threads that read random pages of the destination (faulting on missing
// ones) at a modest pace, each checking what it read against the source's
// snapshot: a page either holds the source's bytes or, once `released` is
// set (ReleasePostcopy), zeros. Anything else is corruption.
class Workload {
 public:
  Workload(const Region& dst, const std::vector<uint8_t>& snapshot, int threads,
           uint64_t seed)
      : dst_(dst), snapshot_(snapshot), progress_(threads) {
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, t, seed] { Run(t, seed + t); });
    }
  }
  ~Workload() { Stop(); }
  void Stop() {
    stop_.store(true);
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  std::vector<uint64_t> Progress() const {
    std::vector<uint64_t> out;
    for (const auto& p : progress_) out.push_back(p.load());
    return out;
  }
  // Waits until no thread made progress for `quiet` (each blocked on a
  // page), up to `timeout`.
  bool AllBlocked(absl::Duration quiet, absl::Duration timeout) const {
    const absl::Time deadline = absl::Now() + timeout;
    std::vector<uint64_t> last = Progress();
    absl::Time since = absl::Now();
    while (absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      std::vector<uint64_t> now = Progress();
      if (now != last) {
        last = now;
        since = absl::Now();
      } else if (absl::Now() - since >= quiet) {
        return true;
      }
    }
    return false;
  }
  // Waits until every thread made `reads` more reads than at `from`.
  bool AllProgressed(const std::vector<uint64_t>& from, uint64_t reads,
                     absl::Duration timeout) const {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      std::vector<uint64_t> now = Progress();
      bool all = true;
      for (size_t i = 0; i < now.size(); ++i) all &= now[i] >= from[i] + reads;
      if (all) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  std::atomic<bool> released{false};
  std::atomic<uint64_t> mismatches{0}, zero_reads{0};

 private:
  void Run(int index, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<uint8_t> page(dst_.page_size);
    while (!stop_.load()) {
      const uint64_t p = rng() % dst_.page_count();
      std::memcpy(page.data(), dst_.page(p), dst_.page_size);
      const uint8_t* want = snapshot_.data() + p * dst_.page_size;
      if (std::memcmp(page.data(), want, dst_.page_size) != 0) {
        const bool zero =
            std::all_of(page.begin(), page.end(), [](uint8_t b) { return !b; });
        if (zero && released.load()) {
          zero_reads.fetch_add(1);
        } else {
          mismatches.fetch_add(1);
        }
      }
      progress_[index].fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  }

  const Region& dst_;
  const std::vector<uint8_t>& snapshot_;
  std::vector<std::atomic<uint64_t>> progress_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

enum class Kill {
  kAbortSource,     // Sender::Abort mid-push
  kAbortReceiver,   // Receiver::Abort mid-push
  kResetSource,     // a source data channel's connection reset under it
  kResetReceiver,   // a destination data channel's connection reset
  kShutdownSource,  // shutdown(SHUT_RDWR) of a source data channel
};

const char* KillName(Kill k) {
  switch (k) {
    case Kill::kAbortSource:
      return "abort_source";
    case Kill::kAbortReceiver:
      return "abort_receiver";
    case Kill::kResetSource:
      return "reset_source";
    case Kill::kResetReceiver:
      return "reset_receiver";
    case Kill::kShutdownSource:
      return "shutdown_source";
  }
  return "?";
}

// A connection reset or shut down under an end, which either end may name
// first.
::testing::Matcher<absl::Status> LostConnection() {
  return StatusIs(absl::StatusCode::kUnavailable,
                  AnyOf(HasSubstr("reset by peer"), HasSubstr("closed by peer"),
                        HasSubstr("Broken pipe")));
}

// What an end's error says of `kill`: an abort's reason, which the other
// end hears from it; or the connection that went.
::testing::Matcher<absl::Status> EndedBy(Kill kill, bool source) {
  switch (kill) {
    case Kill::kAbortSource:
    case Kill::kAbortReceiver:
      // Its own abort is an echo to the end that aborted
      // (base::PreferRootCause): the other end's word that a connection
      // closed, where it comes first, is what that end reports, the abort
      // in its message.
      if (source == (kill == Kill::kAbortSource)) {
        return StatusIs(
            AnyOf(absl::StatusCode::kAborted, absl::StatusCode::kUnavailable),
            HasSubstr("killed by the test"));
      }
      return StatusIs(absl::StatusCode::kAborted,
                      HasSubstr("killed by the test"));
    case Kill::kResetSource:
    case Kill::kResetReceiver:
    case Kill::kShutdownSource:
      return LostConnection();
  }
  return StatusIs(absl::StatusCode::kUnknown);
}

class PostcopyFaultTest
    : public ::testing::TestWithParam<std::tuple<Kill, bool>> {
 protected:
  void SetUp() override { SKIP_WITHOUT_USERFAULTFD(); }
};

// One session, every page missing at the switch, killed by `kill` at a
// random point of its push. `resume`: the destination's
// postcopy_resume_timeout (the source never resumes here).
void KillMidPush(Kill kill, bool urgent, uint64_t seed,
                 absl::Duration resume = absl::ZeroDuration()) {
  std::mt19937_64 rng(seed);
  const uint64_t bytes = testing::ScaledBytes(32ull << 20);
  SessionOptions opt = testing::InsecureOptions();
  opt.channels = 2;
  opt.postcopy = true;
  opt.postcopy_urgent_channel = urgent;
  opt.stall_timeout = absl::Seconds(3);
  opt.postcopy_resume_timeout = resume;
  // The push takes about a second, so every kill lands inside it.
  opt.max_bandwidth = bytes;
  const bool reset = kill == Kill::kResetSource ||
                     kill == Kill::kResetReceiver ||
                     kill == Kill::kShutdownSource;
  const bool on_source = kill != Kill::kResetReceiver;
  const FaultOp op = on_source ? FaultOp::kSendPacket : FaultOp::kReadExact;
  std::unique_ptr<FaultInjector> faults;
  if (reset) {
    faults = std::make_unique<FaultInjector>(testing::FaultPlan{
        .source = on_source,
        .op = op,
        .nth = ~0ull,
        .kind = kill == Kill::kShutdownSource ? FaultKind::kShutdown
                                              : FaultKind::kReset});
  }

  auto src = MakeRegion(1, bytes, seed, /*fill=*/true);
  auto dst = MakeRegion(1, bytes);
  const uint64_t pages = src.region.page_count();
  const std::vector<uint8_t> snapshot(src.region.page(0),
                                      src.region.page(0) + bytes);
  ServingReceiver rx(opt, {dst.region});
  opt.port = rx.port();
  absl::StatusOr<std::unique_ptr<Sender>> connected =
      Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(connected);
  Sender& sender = **connected;
  // Every page missing (no round before the switch).
  DirtyBitmap missing(pages);
  missing.SetAll();
  DirtyBitmap* bitmaps[] = {&missing};
  ASSERT_OK(sender.StartPostcopy(bitmaps));
  Workload workload(dst.region, snapshot, 3, seed * 7);

  const absl::Duration delay = absl::Milliseconds(20 + rng() % 400);
  const uint64_t nth_packet = 1 + rng() % 24;
  SCOPED_TRACE(absl::StrCat(KillName(kill), " urgent=", urgent, " seed=", seed,
                            " delay=", absl::FormatDuration(delay),
                            " packet=", nth_packet));
  Watchdog watchdog(absl::Seconds(60), "post-copy kill test");
  if (reset) faults->ArmAt(faults->calls(on_source, op) + nth_packet);
  const absl::Time start = absl::Now();
  std::future<absl::Status> completed =
      std::async(std::launch::async, [&] { return sender.CompletePostcopy(); });
  absl::Time killed_at;
  if (reset) {
    while (!faults->fired() && absl::Now() - start < absl::Seconds(20)) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_TRUE(faults->fired()) << "the reset never fired";
    killed_at = faults->fired_at();
  } else {
    absl::SleepFor(delay);
    killed_at = absl::Now();
    const absl::Status why = absl::AbortedError("killed by the test");
    if (kill == Kill::kAbortSource) {
      sender.Abort(why);
    } else {
      rx.receiver().Abort(why);
    }
  }
  // Both ends return, with an error, within a bound.
  const absl::Status source_status = completed.get();
  // The destination must end by itself within the bound; one that does
  // not is a failure (aborted here, so the test goes on).
  const absl::Duration bound = resume + absl::Seconds(6);
  while (!rx.done() && absl::Now() - killed_at < bound) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const bool ended = rx.done();
  const absl::Duration took = absl::Now() - killed_at;
  EXPECT_TRUE(ended) << "the destination did not end within "
                     << absl::FormatDuration(bound) << " of the kill";
  if (!ended) rx.receiver().Abort(absl::DeadlineExceededError("hung"));
  const absl::Status dest_status = rx.result();
  // A destination that may be resumed waits that long for its source
  // first, its workload paused, then gives up.
  if (resume > absl::ZeroDuration()) {
    EXPECT_GE(took, resume * 0.8) << dest_status;
  }
  EXPECT_THAT(source_status, EndedBy(kill, /*source=*/true));
  EXPECT_THAT(dest_status, EndedBy(kill, /*source=*/false));
  if (resume > absl::ZeroDuration()) {
    EXPECT_THAT(dest_status.message(), HasSubstr("not resumed within"));
  }
  EXPECT_LE(took, bound + absl::Seconds(1))
      << source_status << " / " << dest_status;
  // The session is over for good, for the same reason.
  EXPECT_THAT(sender.Verify().status(), EndedBy(kill, /*source=*/true));
  EXPECT_THAT(sender.Finish(), EndedBy(kill, /*source=*/true));

  // The source keeps its copy, untouched.
  EXPECT_EQ(std::memcmp(src.region.page(0), snapshot.data(), bytes), 0);

  // The destination still awaits pages, and says so.
  const PostcopyStats d = rx.receiver().stats().postcopy;
  EXPECT_TRUE(d.started);
  EXPECT_EQ(d.missing_pages, pages);
  EXPECT_FALSE(rx.receiver().IsResident(1, 0, pages));
  // A waiter on the pages learns that the session ended, at once, instead
  // of waiting out its deadline.
  const absl::Time wait_start = absl::Now();
  const absl::Status waited =
      rx.receiver().WaitResident(1, 0, pages, absl::Now() + absl::Seconds(20));
  // It is the destination's first failure, which may be its own echo of
  // the kill (a connection closed) where result() has the root cause.
  EXPECT_THAT(waited, AnyOf(EndedBy(kill, /*source=*/false), LostConnection()));
  EXPECT_LT(absl::Now() - wait_start, absl::Seconds(5)) << waited;

  // Its workload is paused on the pages it lacks, not corrupted.
  EXPECT_TRUE(workload.AllBlocked(absl::Milliseconds(300), absl::Seconds(10)))
      << "a faulting thread ran on after the failure";
  EXPECT_EQ(workload.mismatches.load(), 0u);
  const std::vector<uint64_t> blocked_at = workload.Progress();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(workload.Progress(), blocked_at);

  // Given up: the awaited pages become zeros and the threads run on.
  workload.released.store(true);
  absl::StatusOr<uint64_t> released = rx.receiver().ReleasePostcopy();
  ASSERT_OK(released);
  EXPECT_GT(*released, 0u);
  EXPECT_LE(*released, pages);
  EXPECT_TRUE(workload.AllProgressed(blocked_at, 5, absl::Seconds(10)))
      << "a faulting thread stayed blocked after ReleasePostcopy";
  workload.Stop();
  EXPECT_EQ(workload.mismatches.load(), 0u);
  EXPECT_GT(workload.zero_reads.load(), 0u);
  EXPECT_TRUE(rx.receiver().IsResident(1, 0, pages));
  absl::PrintF(
      "[postcopy-kill] %s urgent=%d seed=%d after=%s: source \"%s\" / "
      "destination \"%s\" in %s; released %d of %d pages\n",
      KillName(kill), urgent, seed, absl::FormatDuration(killed_at - start),
      source_status.ToString(), dest_status.ToString(),
      absl::FormatDuration(took), *released, pages);
}

TEST_P(PostcopyFaultTest, KilledMidPushLosesNothing) {
  const auto [kill, urgent] = GetParam();
  const uint64_t base = 1000 + 10 * static_cast<uint64_t>(kill) + urgent;
  for (uint64_t i = 0; i < 2; ++i) {
    KillMidPush(kill, urgent, base + 100 * i);
    if (HasFatalFailure()) return;
  }
}

// With postcopy_resume_timeout the destination waits for a resume that
// never comes, then fails the same way: nothing lost, nothing released.
TEST(PostcopyFaultResumeTest, UnresumedDestinationGivesUpAfterItsTimeout) {
  SKIP_WITHOUT_USERFAULTFD();
  KillMidPush(Kill::kAbortSource, true, 77, absl::Seconds(1));
  if (HasFatalFailure()) return;
  KillMidPush(Kill::kResetSource, false, 78, absl::Seconds(1));
}

INSTANTIATE_TEST_SUITE_P(
    Kills, PostcopyFaultTest,
    ::testing::Combine(::testing::Values(Kill::kAbortSource,
                                         Kill::kAbortReceiver,
                                         Kill::kResetSource,
                                         Kill::kResetReceiver,
                                         Kill::kShutdownSource),
                       ::testing::Bool()),
    [](const auto& info) {
      return absl::StrCat(KillName(std::get<0>(info.param)),
                          std::get<1>(info.param) ? "_urgent" : "_no_urgent");
    });

// ---- a stalled source ----

bool ReadByte(int fd, char* c, absl::Duration timeout) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) {
    return false;
  }
  return read(fd, c, 1) == 1;
}

// The source, in a child process, switches to post-copy and then stops
// (SIGSTOP: its kernel keeps the connections open and ACKs, so nothing
// closes). The destination, its workload blocked on missing pages, ends the
// session within the stall timeout; its threads stay blocked until
// ReleasePostcopy.
TEST(PostcopyStallTest, StoppedSourceEndsTheDestinationAfterTheStallTimeout) {
  SKIP_WITHOUT_USERFAULTFD();
  if (!testing::SingleThreaded()) {
    GTEST_SKIP() << "other threads run here: fork() is not safe";
  }
  const uint64_t bytes = 16ull << 20;
  const absl::Duration stall = absl::Seconds(1);
  SessionOptions opt = testing::InsecureOptions();
  opt.channels = 2;
  opt.postcopy = true;
  opt.stall_timeout = stall;
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(to_child[1]);
    close(to_parent[0]);
    uint16_t port = 0;
    if (read(to_child[0], &port, sizeof port) != sizeof port) _exit(2);
    auto src = MakeRegion(1, bytes, 5, /*fill=*/true);
    SessionOptions o = opt;
    o.port = port;
    absl::StatusOr<std::unique_ptr<Sender>> s =
        Sender::Connect(o, {&src.region, 1});
    if (!s.ok()) _exit(3);
    DirtyBitmap missing(src.region.page_count());
    missing.SetAll();
    DirtyBitmap* b[] = {&missing};
    if (!(*s)->StartPostcopy(b).ok()) _exit(4);
    char armed = 'A';
    if (write(to_parent[1], &armed, 1) != 1) _exit(5);
    raise(SIGSTOP);
    _exit(0);
  }
  close(to_child[0]);
  close(to_parent[1]);
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reaper{pid};
  Watchdog watchdog(absl::Seconds(60), "stalled-source test");
  auto dst = MakeRegion(1, bytes);
  auto want = MakeRegion(1, bytes, 5, /*fill=*/true);  // the child's bytes
  const std::vector<uint8_t> snapshot(want.region.page(0),
                                      want.region.page(0) + bytes);
  ServingReceiver rx(opt, {dst.region});
  const uint16_t port = rx.port();
  ASSERT_EQ(write(to_child[1], &port, sizeof port), sizeof port);
  char armed = 0;
  ASSERT_TRUE(ReadByte(to_parent[0], &armed, absl::Seconds(30)))
      << "the child source did not switch to post-copy";
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(wstatus)) << "the child source did not stop";
  const absl::Time stopped = absl::Now();

  Workload workload(dst.region, snapshot, 2, 77);
  const absl::Status st = rx.result();
  const absl::Duration took = absl::Now() - stopped;
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kDeadlineExceeded,
                           HasSubstr("source stalled")));
  EXPECT_GE(took, stall * 0.5) << st;
  EXPECT_LT(took, stall + absl::Seconds(5)) << st;
  const PostcopyStats d = rx.receiver().stats().postcopy;
  EXPECT_TRUE(d.started);
  EXPECT_EQ(d.missing_pages, dst.region.page_count());
  EXPECT_FALSE(rx.receiver().IsResident(1, 0, dst.region.page_count()));
  EXPECT_TRUE(workload.AllBlocked(absl::Milliseconds(300), absl::Seconds(10)));
  const std::vector<uint64_t> blocked_at = workload.Progress();
  EXPECT_EQ(workload.mismatches.load(), 0u);
  workload.released.store(true);
  absl::StatusOr<uint64_t> released = rx.receiver().ReleasePostcopy();
  ASSERT_OK(released);
  EXPECT_GT(*released, 0u);
  EXPECT_TRUE(workload.AllProgressed(blocked_at, 5, absl::Seconds(10)));
  workload.Stop();
  EXPECT_EQ(workload.mismatches.load(), 0u);
  EXPECT_GT(workload.zero_reads.load(), 0u);
  absl::PrintF("[postcopy-stall] destination \"%s\" after %s\n", st.ToString(),
               absl::FormatDuration(took));
}

// ---- freeing a destination whose post-copy failed ----

// Review C3: a VMM's error path frees the migration, then stops its vCPUs.
// The destination (a child process: its faulting thread ends only with it)
// loses its source in post-copy with a thread blocked on a missing page,
// then frees its Receiver: the thread must stay blocked, not run on with a
// fresh zero page the kernel hands it once the userfaultfd closes.
TEST(PostcopyFreedDestinationTest, FreeingTheReceiverLeavesFaultsBlocked) {
  SKIP_WITHOUT_USERFAULTFD();
  if (!testing::SingleThreaded()) {
    GTEST_SKIP() << "other threads run here: fork() is not safe";
  }
  const uint64_t bytes = 8ull << 20;
  SessionOptions opt = testing::InsecureOptions();
  opt.channels = 2;
  opt.postcopy = true;
  opt.stall_timeout = absl::Seconds(2);
  int to_parent[2];
  ASSERT_EQ(pipe(to_parent), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(to_parent[0]);
    auto dst = MakeRegion(1, bytes);
    absl::StatusOr<std::unique_ptr<Receiver>> rx =
        Receiver::Listen(opt, {&dst.region, 1});
    if (!rx.ok()) _exit(2);
    std::atomic<bool> armed{false};
    (*rx)->OnPostcopyArmed([&] { armed.store(true); });
    const uint16_t port = (*rx)->port();
    if (write(to_parent[1], &port, sizeof port) != sizeof port) _exit(3);
    std::atomic<bool> served{false};
    std::thread serve([&] {
      (void)(*rx)->Serve();
      served.store(true);
    });
    // A page of the missing set, touched once the source is gone (so that
    // nobody asked for it while it could still come).
    std::atomic<int> read{0};  // 1: faulting, 2: read, its byte in value
    std::atomic<int> value{-1};
    std::thread faulting([&] {
      while (!served.load()) absl::SleepFor(absl::Milliseconds(1));
      read.store(1);
      value.store(static_cast<volatile uint8_t*>(dst.region.page(7))[9]);
      read.store(2);
    });
    faulting.detach();  // it may never return
    serve.join();       // the source is gone: Serve fails
    absl::SleepFor(absl::Milliseconds(200));
    if (!armed.load()) _exit(4);
    char verdict = read.load() == 2 ? 'E' : 'B';  // E: released early
    if (verdict == 'B') {
      rx->reset();
      absl::SleepFor(absl::Milliseconds(300));
      if (read.load() == 2) verdict = value.load() == 0 ? 'Z' : 'D';
    }
    (void)!write(to_parent[1], &verdict, 1);
    _exit(0);
  }
  close(to_parent[1]);
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reaper{pid};
  Watchdog watchdog(absl::Seconds(60), "freed-destination test");
  uint16_t port = 0;
  ASSERT_EQ(read(to_parent[0], &port, sizeof port), sizeof port);
  auto src = MakeRegion(1, bytes, 9, /*fill=*/true);
  opt.port = port;
  {
    absl::StatusOr<std::unique_ptr<Sender>> sender =
        Sender::Connect(opt, {&src.region, 1});
    ASSERT_OK(sender);
    DirtyBitmap missing(src.region.page_count());
    missing.SetAll();
    DirtyBitmap* b[] = {&missing};
    ASSERT_OK((*sender)->StartPostcopy(b));
    // Switched, nothing pushed or answered (that is CompletePostcopy's):
    // the destination's thread faults and waits; then the source is gone.
    absl::SleepFor(absl::Milliseconds(300));
    (*sender)->Abort(absl::UnavailableError("source gone (test)"));
  }
  char verdict = 0;
  ASSERT_TRUE(ReadByte(to_parent[0], &verdict, absl::Seconds(30)));
  EXPECT_EQ(verdict, 'B')
      << "E: the thread ran on before the free; Z: it ran on with a zero "
         "page after the free; D: it got data";
}

// ---- the destination killed or stopped, in a child process ----

// The source mid-push, its destination (a child process) killed (SIGKILL:
// every connection closes) or stopped (SIGSTOP: nothing closes, nothing
// answers): CompletePostcopy fails, within the stall timeout for a stopped
// one, and the source's memory is what it was.
void DestinationGoes(int sig) {
  const uint64_t bytes = 32ull << 20;
  SessionOptions opt = testing::InsecureOptions();
  opt.channels = 2;
  opt.postcopy = true;
  opt.stall_timeout = absl::Seconds(1);
  opt.max_bandwidth = bytes;  // a push of about a second
  testing::ChildDestination child(opt, bytes);
  ASSERT_NE(child.port(), 0);
  Watchdog watchdog(absl::Seconds(60), "destination-gone test");
  auto src = MakeRegion(1, bytes, 13, /*fill=*/true);
  const std::vector<uint8_t> snapshot(src.region.page(0),
                                      src.region.page(0) + bytes);
  opt.port = child.port();
  absl::StatusOr<std::unique_ptr<Sender>> sender =
      Sender::Connect(opt, {&src.region, 1});
  ASSERT_OK(sender);
  DirtyBitmap missing(src.region.page_count());
  missing.SetAll();
  DirtyBitmap* bitmaps[] = {&missing};
  ASSERT_OK((*sender)->StartPostcopy(bitmaps));
  std::future<absl::Status> completed = std::async(
      std::launch::async, [&] { return (*sender)->CompletePostcopy(); });
  absl::SleepFor(absl::Milliseconds(200));
  child.Signal(sig);
  const absl::Time gone = absl::Now();
  const absl::Status st = completed.get();
  const absl::Duration took = absl::Now() - gone;
  // Killed, its connections close; stopped, it stalls.
  ::testing::Matcher<absl::Status> ended = StatusIs(
      absl::StatusCode::kDeadlineExceeded, HasSubstr("destination stalled"));
  if (sig == SIGKILL) {
    ended =
        StatusIs(absl::StatusCode::kUnavailable,
                 AnyOf(HasSubstr("closed by peer"), HasSubstr("reset by peer"),
                       HasSubstr("Broken pipe")));
  }
  EXPECT_THAT(st, ended);
  EXPECT_LT(took, opt.stall_timeout + absl::Seconds(5)) << st;
  EXPECT_THAT((*sender)->Finish(), ended);
  EXPECT_TRUE((*sender)->stats().postcopy.started);
  EXPECT_EQ((*sender)->stats().postcopy.missing_pages, src.region.page_count());
  EXPECT_EQ(std::memcmp(src.region.page(0), snapshot.data(), bytes), 0);
  absl::PrintF("[postcopy-dest-gone] signal %d: source \"%s\" after %s\n", sig,
               st.ToString(), absl::FormatDuration(took));
}

TEST(PostcopyDestinationGoneTest, KilledDestinationFailsTheSource) {
  SKIP_WITHOUT_USERFAULTFD();
  if (!testing::SingleThreaded()) {
    GTEST_SKIP() << "other threads run here: fork() is not safe";
  }
  DestinationGoes(SIGKILL);
}

TEST(PostcopyDestinationGoneTest, StoppedDestinationFailsTheSource) {
  SKIP_WITHOUT_USERFAULTFD();
  if (!testing::SingleThreaded()) {
    GTEST_SKIP() << "other threads run here: fork() is not safe";
  }
  DestinationGoes(SIGSTOP);
}

// ---- bad input from the network during post-copy ----
//
// A hand-made source (tests/support/fake_source.h) feeds a real post-copy
// destination what a correct Sender never sends. Each must end the session
// with a clear error, within a bound, and write nothing outside what the
// source may write (the region sits between guard pages: a stray write
// crashes the test).

class PostcopyBadInputTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kBytes = 1 << 20;  // 256 pages
  static constexpr uint64_t kPages = kBytes / 4096;

  void SetUp() override {
    SKIP_WITHOUT_USERFAULTFD();
    // Filled, so a dropped page is seen (it would read as zero).
    dst_ = MakeRegion(1, kBytes, 5, /*fill=*/true);
    snapshot_.assign(dst_.region.page(0), dst_.region.page(0) + kBytes);
    SessionOptions opt = testing::InsecureOptions();
    opt.channels = 2;
    opt.postcopy = true;
    opt.stall_timeout = absl::Seconds(5);
    rx_ = std::make_unique<ServingReceiver>(opt,
                                            std::vector<Region>{dst_.region});
    src_ = std::make_unique<testing::FakeSource>(rx_->port(), 2);
  }
  // Opens the session: control, channels and, with `urgent`, the urgent
  // connection (without it, the session is negotiated without one).
  void Open(bool urgent) {
    // A fresh session, not a resumed one (a control Hello that offers
    // resume names the session to resume).
    uint64_t caps = src_->MakeHello(proto::Role::kControl, 0).capabilities &
                    ~proto::kFeaturePostcopyResume;
    if (!urgent) caps &= ~proto::kFeaturePostcopyUrgent;
    src_->set_capabilities(caps);
    absl::Status open = src_->OpenControl(Table());
    ASSERT_OK(open);
    ASSERT_OK(src_->OpenAllChannels());
    if (urgent) {
      absl::StatusOr<int> fd = OpenUrgent();
      ASSERT_OK(fd);
      urgent_ = *fd;
    }
  }
  void TearDown() override {
    if (rx_ != nullptr && !rx_->done()) {
      rx_->receiver().Abort(absl::CancelledError("test over"));
    }
  }

  static std::vector<proto::RegionInfo> Table() {
    return {{1, 4096, kBytes, "region-1"}};
  }
  static std::vector<uint8_t> MissingFrame(const proto::MissingPages& m) {
    std::vector<uint8_t> frame =
        proto::StartFrame(proto::ControlType::kMissingPages);
    proto::EncodeMissingPages(m, &frame);
    proto::FinishFrame(frame);
    return frame;
  }
  static std::vector<uint8_t> RawFrame(proto::ControlType type,
                                       const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> frame = proto::StartFrame(type);
    frame.insert(frame.end(), payload.begin(), payload.end());
    proto::FinishFrame(frame);
    return frame;
  }
  // The next control message that is not a heartbeat.
  absl::StatusOr<engine::ControlChannel::Message> NextControl() {
    while (true) {
      absl::StatusOr<engine::ControlChannel::Message> m = src_->ReadControl();
      if (!m.ok() || m->type != proto::ControlType::kHeartbeat) return m;
    }
  }
  // Switches with `ranges` missing and waits for POSTCOPY_ARMED.
  void Arm(std::vector<proto::PageRange> ranges) {
    ASSERT_OK(src_->SendControl(MissingFrame({1, true, ranges})));
    absl::StatusOr<engine::ControlChannel::Message> m = NextControl();
    ASSERT_OK(m);
    std::string why;
    if (m->type == proto::ControlType::kError) {
      absl::StatusOr<proto::ErrorMessage> e = proto::DecodeError(m->payload);
      if (e.ok()) why = e->text;
    }
    ASSERT_EQ(m->type, proto::ControlType::kPostcopyArmed)
        << proto::ControlTypeName(m->type) << " " << why;
  }
  absl::StatusOr<int> OpenUrgent() {
    return src_->Connect(src_->MakeHello(proto::Role::kUrgent, 0));
  }
  static absl::Status Write(int fd, const std::vector<uint8_t>& bytes) {
    return channels::WriteWithDeadline(fd, bytes,
                                       absl::Now() + absl::Seconds(5));
  }
  // The receiver's end: an error with `code` naming `says`, within the
  // bound.
  void ExpectEnds(absl::StatusCode code, const std::string& says) {
    Watchdog watchdog(absl::Seconds(30), "bad post-copy input");
    absl::Status s = rx_->result();
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(says));
  }
  bool Unchanged(uint64_t first, uint64_t pages) const {
    return std::memcmp(dst_.region.page(first), snapshot_.data() + first * 4096,
                       pages * 4096) == 0;
  }

  testing::TestRegion dst_;
  std::vector<uint8_t> snapshot_;
  std::unique_ptr<ServingReceiver> rx_;
  std::unique_ptr<testing::FakeSource> src_;
  int urgent_ = -1;  // owned by src_
};

TEST_F(PostcopyBadInputTest, MissingRangePastTheRegionDropsNothing) {
  Open(/*urgent=*/false);
  std::vector<uint8_t> payload;
  proto::WireWriter w(&payload);
  w.U32(1);
  w.U32(proto::kMissingPagesLast);
  w.U32(1);
  w.U64(kPages - 1);
  w.U64(2);
  (void)src_->SendControl(RawFrame(proto::ControlType::kMissingPages, payload));
  ExpectEnds(absl::StatusCode::kInvalidArgument, "runs past");
  EXPECT_TRUE(Unchanged(0, kPages)) << "pages dropped by a refused set";
  EXPECT_FALSE(rx_->receiver().stats().postcopy.started);
}

TEST_F(PostcopyBadInputTest, MissingSetOverlappingAcrossMessagesIsRefused) {
  Open(/*urgent=*/false);
  ASSERT_OK(src_->SendControl(MissingFrame({1, false, {{10, 5}}})));
  (void)src_->SendControl(MissingFrame({1, true, {{12, 1}}}));
  ExpectEnds(absl::StatusCode::kInvalidArgument, "across messages");
  EXPECT_FALSE(rx_->receiver().stats().postcopy.started) << "never armed";
  // Only the accepted message's pages went; nothing past them.
  EXPECT_TRUE(Unchanged(0, 10));
  EXPECT_TRUE(Unchanged(15, kPages - 15));
}

TEST_F(PostcopyBadInputTest, MissingPagesForAnUnknownRegionIsRefused) {
  Open(/*urgent=*/false);
  (void)src_->SendControl(MissingFrame({7, true, {{0, 1}}}));
  ExpectEnds(absl::StatusCode::kInvalidArgument, "region 7");
  EXPECT_TRUE(Unchanged(0, kPages));
}

TEST_F(PostcopyBadInputTest, SecondSwitchAfterArmedIsRefused) {
  Open(/*urgent=*/false);
  Arm({{0, 4}});
  (void)src_->SendControl(MissingFrame({1, true, {{100, 1}}}));
  ExpectEnds(absl::StatusCode::kFailedPrecondition,
             "after the post-copy switch");
  EXPECT_TRUE(Unchanged(4, kPages - 4));
  EXPECT_FALSE(rx_->receiver().IsResident(1, 0, 4));
  absl::StatusOr<uint64_t> released = rx_->receiver().ReleasePostcopy();
  ASSERT_OK(released);
  EXPECT_EQ(*released, 4u);
}

TEST_F(PostcopyBadInputTest, FinishDuringPostcopyIsRefused) {
  Open(/*urgent=*/false);
  Arm({{0, 4}, {10, 1}});
  (void)src_->SendControl(proto::StartFrame(proto::ControlType::kFinish));
  ExpectEnds(absl::StatusCode::kFailedPrecondition, "FINISH during post-copy");
  EXPECT_FALSE(rx_->receiver().IsResident(1, 0, 11));
  EXPECT_OK(rx_->receiver().ReleasePostcopy());
}

TEST_F(PostcopyBadInputTest, PageDataOutsideTheRegionOnTheUrgentConnection) {
  Open(/*urgent=*/true);
  const int* urgent = &urgent_;
  Arm({{kPages - 2, 2}});
  std::vector<uint8_t> payload;
  proto::WireWriter w(&payload);
  w.U32(1);
  w.U32(0);
  w.U64(kPages - 1);
  w.U32(2);  // one page past the end
  w.U32(0);
  payload.resize(payload.size() + 2 * 4096, 0xCC);
  (void)Write(*urgent, RawFrame(proto::ControlType::kPageData, payload));
  ExpectEnds(absl::StatusCode::kInvalidArgument, "urgent connection");
  EXPECT_FALSE(rx_->receiver().IsResident(1, kPages - 2, 2));
  EXPECT_TRUE(Unchanged(0, kPages - 2));
  EXPECT_OK(rx_->receiver().ReleasePostcopy());
}

TEST_F(PostcopyBadInputTest, PageDataWithReservedFieldSetIsRefused) {
  Open(/*urgent=*/true);
  const int* urgent = &urgent_;
  Arm({{3, 1}});
  std::vector<uint8_t> payload;
  proto::WireWriter w(&payload);
  w.U32(1);
  w.U32(proto::kPageDataZero);
  w.U64(3);
  w.U32(1);
  w.U32(7);  // reserved
  (void)Write(*urgent, RawFrame(proto::ControlType::kPageData, payload));
  ExpectEnds(absl::StatusCode::kInvalidArgument, "reserved");
  EXPECT_FALSE(rx_->receiver().IsResident(1, 3, 1)) << "placed anyway";
  EXPECT_OK(rx_->receiver().ReleasePostcopy());
}

TEST_F(PostcopyBadInputTest, UnexpectedMessageOnTheUrgentConnection) {
  Open(/*urgent=*/true);
  const int* urgent = &urgent_;
  Arm({{3, 1}});
  (void)Write(*urgent, proto::EncodePageRequest({1, {3}}));
  ExpectEnds(absl::StatusCode::kInvalidArgument, "only PAGE_DATA");
  EXPECT_OK(rx_->receiver().ReleasePostcopy());
}

TEST_F(PostcopyBadInputTest, SecondUrgentConnectionIsRefused) {
  Open(/*urgent=*/true);
  const int* urgent = &urgent_;
  EXPECT_THAT(OpenUrgent(),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("no urgent connection to open, or has it")));
  // The session goes on: the switch still arms, and a correct answer
  // places its page.
  Arm({{3, 1}});
  std::vector<uint8_t> page(4096, 0x77);
  ASSERT_OK(Write(*urgent, proto::EncodePageData(1, 3, 1, page.data())));
  Watchdog watchdog(absl::Seconds(30), "placement");
  ASSERT_OK(
      rx_->receiver().WaitResident(1, 3, 1, absl::Now() + absl::Seconds(10)));
  EXPECT_EQ(std::memcmp(dst_.region.page(3), page.data(), 4096), 0);
  EXPECT_TRUE(Unchanged(0, 3));
  EXPECT_TRUE(Unchanged(4, kPages - 4));
  // Complete: the destination says so.
  absl::StatusOr<engine::ControlChannel::Message> m = NextControl();
  ASSERT_OK(m);
  EXPECT_EQ(m->type, proto::ControlType::kPostcopyComplete)
      << proto::ControlTypeName(m->type);
}

TEST_F(PostcopyBadInputTest, PageDataOnTheControlConnectionIsRefused) {
  Open(/*urgent=*/false);
  Arm({{3, 1}});
  std::vector<uint8_t> page(4096, 0x77);
  (void)src_->SendControl(proto::EncodePageData(1, 3, 1, page.data()));
  ExpectEnds(absl::StatusCode::kInvalidArgument, "PAGE_DATA");
  EXPECT_FALSE(rx_->receiver().IsResident(1, 3, 1)) << "placed from control";
  EXPECT_OK(rx_->receiver().ReleasePostcopy());
}

TEST(PostcopyBadInputNoPostcopyTest, MissingPagesWithoutPostcopyIsRefused) {
  SKIP_WITHOUT_USERFAULTFD();
  auto dst = MakeRegion(1, 1 << 20, 5, /*fill=*/true);
  const std::vector<uint8_t> before(dst.region.page(0),
                                    dst.region.page(0) + (1 << 20));
  SessionOptions opt = testing::InsecureOptions();  // postcopy off
  opt.channels = 1;
  ServingReceiver rx(opt, {dst.region});
  testing::FakeSource src(rx.port(), 1);
  src.set_capabilities(src.MakeHello(proto::Role::kControl, 0).capabilities &
                       ~proto::kFeaturePostcopyResume);
  ASSERT_OK(src.OpenControl({{1, 4096, 1 << 20, "region-1"}}));
  ASSERT_OK(src.OpenAllChannels());
  std::vector<uint8_t> frame =
      proto::StartFrame(proto::ControlType::kMissingPages);
  proto::EncodeMissingPages({1, true, {{0, 4}}}, &frame);
  proto::FinishFrame(frame);
  (void)src.SendControl(frame);
  Watchdog watchdog(absl::Seconds(30), "MISSING_PAGES without post-copy");
  absl::Status s = rx.result();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("did not negotiate"));
  EXPECT_EQ(std::memcmp(dst.region.page(0), before.data(), before.size()), 0);
}

}  // namespace
}  // namespace ramferry
