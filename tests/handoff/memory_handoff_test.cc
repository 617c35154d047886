// The memory hand-off (ramferry/memory_handoff.h) against the real kernel:
// a workload exports memfd regions, a migration process attaches (in this
// process, and across fork()), collects exactly the pages written, pauses
// the workload through its handler or with SIGSTOP, resumes and ends it;
// a destination hands memory over to an adopter. Bad regions, bad peers
// and bad network input are refused with an error, never a crash or a
// hang. The C API once through the same flow.
#include "ramferry/memory_handoff.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/owned_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "handoff/unix_seqpacket.h"
#include "proto/memory_handoff.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/ramferry.h"
#include "ramferry/write_tracker.h"
#include "tests/support/status_matchers.h"
#include "tests/support/uffd_skip.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr uint64_t kPage = 4096;

int64_t MonotonicNs() { return static_cast<int64_t>(base::MonotonicNs()); }

// A memfd of `pages` pages.
int NewMemfd(uint64_t pages) {
  const int fd = memfd_create("handoff_test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(pages * kPage)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

uint8_t* MapShared(int fd, uint64_t offset, uint64_t length) {
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                 static_cast<off_t>(offset));
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

std::vector<uint64_t> SetPages(const DirtyBitmap& b) {
  std::vector<uint64_t> out;
  for (uint64_t p = 0; p < b.pages(); ++p) {
    if (b.Test(p)) out.push_back(p);
  }
  return out;
}

// One byte from `fd` within `ms`, or -1 (timeout or EOF).
int ReadByte(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, ms) != 1) return -1;
  uint8_t b;
  return read(fd, &b, 1) == 1 ? b : -1;
}

bool WriteBytes(int fd, const void* data, size_t n) {
  return write(fd, data, n) == static_cast<ssize_t>(n);
}

// What /proc/self/fd/N names.
std::string FdTarget(int fd) {
  std::error_code ec;
  return std::filesystem::read_symlink(absl::StrCat("/proc/self/fd/", fd), ec)
      .string();
}

char ProcState(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size()
             ? '?'
             : line[close + 2];
}

// The sockets' directory, checked empty at the end. HandOverTest's tests
// need nothing of the kernel beyond unix sockets and memfds; the export
// tracks writes with userfaultfd, so MemoryHandoffTest's skip without it.
class HandOverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/handoffXXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (dir_.empty()) return;
    // Every socket must have been unlinked by its owner.
    std::vector<std::string> left;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      left.push_back(e.path().filename().string());
    }
    EXPECT_TRUE(left.empty()) << "stray files, first: " << left.front();
    std::filesystem::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

class MemoryHandoffTest : public HandOverTest {
 protected:
  void SetUp() override {
    const std::string why = testing::UserfaultfdSkipReason();
    if (!why.empty()) GTEST_SKIP() << why;
    HandOverTest::SetUp();
  }
};

// ---- one process: export and attach side by side ----

TEST_F(MemoryHandoffTest, ExportAndAttachInOneProcessCollectExactWrites) {
  const int a = NewMemfd(1024 + 16);
  const int b = NewMemfd(8);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  uint8_t* r1 = MapShared(a, 0, 1024 * kPage);
  uint8_t* r2 = MapShared(a, 1024 * kPage, 16 * kPage);
  uint8_t* r3 = MapShared(b, 0, 8 * kPage);
  ASSERT_TRUE(r1 && r2 && r3);
  std::memset(r1, 0x11, kPage);  // data before the export: not reported
  std::vector<SharedRegion> regions = {
      {1, "big", r1, 1024 * kPage, a, 0},
      {2, "tail", r2, 16 * kPage, a, 1024 * kPage},
      {3, "other", r3, 8 * kPage, b, 0}};
  std::atomic<int> events{0};
  absl::StatusOr<std::unique_ptr<MemoryExport>> exp = MemoryExport::Listen(
      Path("export.sock"), regions, [&](ExportEvent) { ++events; });
  ASSERT_OK(exp);
  EXPECT_EQ((*exp)->socket_path(), Path("export.sock"));
  EXPECT_EQ((*exp)->paused_at_ns(), 0);

  absl::StatusOr<std::unique_ptr<AttachedMemory>> att =
      AttachedMemory::Attach(Path("export.sock"), absl::Seconds(10));
  ASSERT_OK(att);
  EXPECT_EQ((*att)->pid(), getpid());
  EXPECT_TRUE((*att)->pauses_itself());
  absl::Span<const Region> got = (*att)->regions();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].id, 1u);
  EXPECT_EQ(got[0].name, "big");
  EXPECT_EQ(got[0].length, 1024 * kPage);
  EXPECT_EQ(got[1].id, 2u);
  EXPECT_EQ(got[1].length, 16 * kPage);
  EXPECT_EQ(got[2].id, 3u);
  EXPECT_NE(got[0].base, r1);  // mapped again, here
  // The same physical pages: what the workload wrote before shows.
  EXPECT_EQ(static_cast<const uint8_t*>(got[0].base)[100], 0x11);

  // Writes after attach: pages 0, 5 (twice), 1000, and one store straddling
  // pages 7 and 8 of region 1; page 2 of region 3.
  r1[0] = 1;
  r1[5 * kPage + 9] = 2;
  r1[5 * kPage + 10] = 3;
  r1[1000 * kPage + 4095] = 4;
  const uint64_t straddle = 0x0102030405060708ull;
  std::memcpy(r1 + 8 * kPage - 4, &straddle, sizeof straddle);
  r3[2 * kPage] = 5;

  DirtyBitmap d1(1024), d2(16), d3(8);
  std::vector<DirtyBitmap*> ds = {&d1, &d2, &d3};
  absl::StatusOr<uint64_t> n = (*att)->CollectWritten(ds);
  ASSERT_OK(n);
  EXPECT_EQ(*n, 6u);
  EXPECT_THAT(SetPages(d1), UnorderedElementsAre(0, 5, 7, 8, 1000));
  EXPECT_TRUE(SetPages(d2).empty());
  EXPECT_THAT(SetPages(d3), UnorderedElementsAre(2));
  // The attached mapping shows the workload's bytes.
  const uint8_t* m1 = static_cast<const uint8_t*>(got[0].base);
  EXPECT_EQ(m1[5 * kPage + 10], 3);
  EXPECT_EQ(m1[1000 * kPage + 4095], 4);
  EXPECT_EQ(std::memcmp(m1 + 8 * kPage - 4, &straddle, 8), 0);
  EXPECT_EQ(static_cast<const uint8_t*>(got[2].base)[2 * kPage], 5);

  // Nothing written since: nothing reported, the bitmaps only ORed into.
  DirtyBitmap e1(1024), e2(16), e3(8);
  std::vector<DirtyBitmap*> es = {&e1, &e2, &e3};
  n = (*att)->CollectWritten(es);
  ASSERT_OK(n);
  EXPECT_EQ(*n, 0u);
  EXPECT_EQ(e1.Count() + e2.Count() + e3.Count(), 0u);

  // Re-armed: a write to the second region of the same memfd shows.
  r2[15 * kPage] = 9;
  n = (*att)->CollectWritten(es);
  ASSERT_OK(n);
  EXPECT_EQ(*n, 1u);
  EXPECT_THAT(SetPages(e2), UnorderedElementsAre(15));
  EXPECT_EQ(static_cast<const uint8_t*>(got[1].base)[15 * kPage], 9);

  // Bitmaps that do not fit the regions are refused.
  std::vector<DirtyBitmap*> two = {&e1, &e2};
  EXPECT_EQ((*att)->CollectWritten(two).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<DirtyBitmap*> wrong = {&e2, &e1, &e3};
  EXPECT_EQ((*att)->CollectWritten(wrong).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Pause and migrate in process: the handler runs on the export's thread.
  ASSERT_OK((*att)->Pause(absl::Seconds(5)));
  EXPECT_FALSE((*att)->stopped_by_signal());
  EXPECT_EQ(events.load(), 1);
  EXPECT_GT((*exp)->paused_at_ns(), 0);
  ASSERT_OK((*att)->Migrated());
  EXPECT_OK((*exp)->WaitMigrated(absl::Seconds(10)));
  EXPECT_EQ(events.load(), 2);

  att->reset();
  exp->reset();
  munmap(r1, 1024 * kPage);
  munmap(r2, 16 * kPage);
  munmap(r3, 8 * kPage);
  close(a);
  close(b);
}

TEST_F(MemoryHandoffTest, SecondAttacherGetsAnErrorNotAHang) {
  const int fd = NewMemfd(4);
  uint8_t* base = MapShared(fd, 0, 4 * kPage);
  ASSERT_NE(base, nullptr);
  const SharedRegion r{1, "r", base, 4 * kPage, fd, 0};
  auto exp = MemoryExport::Listen(Path("e.sock"), {&r, 1}, nullptr);
  ASSERT_OK(exp);
  auto first = AttachedMemory::Attach(Path("e.sock"), absl::Seconds(10));
  ASSERT_OK(first);
  EXPECT_FALSE((*first)->pauses_itself());
  const absl::Time start = absl::Now();
  auto second = AttachedMemory::Attach(Path("e.sock"), absl::Milliseconds(300));
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kDeadlineExceeded,
                               HasSubstr("the peer sent nothing within")));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kDeadlineExceeded)
      << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr("another migration"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  first->reset();
  exp->reset();
  munmap(base, 4 * kPage);
  close(fd);
}

TEST_F(HandOverTest, AttachWithNobodyListeningFailsWithinTheTimeout) {
  const absl::Time start = absl::Now();
  auto att =
      AttachedMemory::Attach(Path("nobody.sock"), absl::Milliseconds(200));
  ASSERT_THAT(att, StatusIs(absl::StatusCode::kUnavailable,
                            HasSubstr("No such file or directory")));
  EXPECT_THAT(att.status().message(), HasSubstr("nobody.sock"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // A path too long for a unix socket.
  att = AttachedMemory::Attach(Path(std::string(200, 'x')), absl::Seconds(1));
  EXPECT_EQ(att.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MemoryHandoffTest, AttachToAnAdopterIsAnError) {
  auto adopt = AdoptedMemory::Listen(Path("adopt.sock"));
  ASSERT_OK(adopt);
  const absl::Time start = absl::Now();
  auto att =
      AttachedMemory::Attach(Path("adopt.sock"), absl::Milliseconds(300));
  ASSERT_THAT(att, StatusIs(absl::StatusCode::kDeadlineExceeded,
                            HasSubstr("the peer sent nothing within")));
  EXPECT_THAT(att.status().message(), HasSubstr("adopt.sock"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // The adopter, waiting meanwhile, is not disturbed by an attacher that
  // never offers anything, and still times out cleanly.
  EXPECT_EQ((*adopt)->Wait(absl::Milliseconds(100)).code(),
            absl::StatusCode::kDeadlineExceeded);
}

// ---- a forked workload ----

enum class Handler { kNone, kRecord, kBlockOnPause };

// A child process that exports one memfd region of kChildPages pages at
// `path`, and writes pages on command. Its handler writes the event's
// letter (P, R, M, D) to events(); kBlockOnPause first waits for a byte on
// the release pipe.
constexpr uint64_t kChildPages = 16;

class Workload {
 public:
  Workload(const std::string& path, Handler handler) {
    int cmd[2], ack[2], ev[2], rel[2];
    if (pipe2(cmd, O_CLOEXEC) || pipe2(ack, O_CLOEXEC) ||
        pipe2(ev, O_CLOEXEC) || pipe2(rel, O_CLOEXEC)) {
      return;
    }
    pid_ = fork();
    if (pid_ == 0) {
      close(cmd[1]);
      close(ack[0]);
      close(ev[0]);
      close(rel[1]);
      RunChild(path, handler, cmd[0], ack[1], ev[1], rel[0]);
    }
    close(cmd[0]);
    close(ack[1]);
    close(ev[1]);
    close(rel[0]);
    cmd_ = cmd[1];
    ack_ = ack[0];
    events_ = ev[0];
    release_ = rel[1];
  }
  ~Workload() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    for (int fd : {cmd_, ack_, events_, release_}) {
      if (fd >= 0) close(fd);
    }
  }

  pid_t pid() const { return pid_; }
  int events() const { return events_; }
  // 'L' once listening, 'E' if the export failed.
  int Started() { return ReadByte(ack_, 10000); }
  bool Write(uint8_t page) {
    const uint8_t c[2] = {'w', page};
    return WriteBytes(cmd_, c, 2) && ReadByte(ack_, 10000) == 'a';
  }
  bool FreeExport() {
    return WriteBytes(cmd_, "f", 1) && ReadByte(ack_, 10000) == 'a';
  }
  // The child unmaps its exported memory (its export stays).
  bool Unmap() {
    return WriteBytes(cmd_, "u", 1) && ReadByte(ack_, 10000) == 'a';
  }
  // The child's main thread exits (as by pthread_exit: its group leader
  // stays a zombie), and a thread it started serves these commands from then
  // on.
  bool ExitMainThread() {
    return WriteBytes(cmd_, "z", 1) && ReadByte(ack_, 10000) == 'a';
  }
  // The child's paused_at_ns().
  int64_t PausedAtNs() {
    if (!WriteBytes(cmd_, "t", 1)) return -1;
    int64_t ns = -1;
    pollfd p{ack_, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1 || read(ack_, &ns, sizeof ns) != sizeof ns) {
      return -1;
    }
    return ns;
  }
  // What the child's WaitMigrated(10 s) returned: 'O' for OK.
  int WaitMigrated() {
    return WriteBytes(cmd_, "m", 1) ? ReadByte(ack_, 15000) : -1;
  }
  bool Release() { return WriteBytes(release_, "x", 1); }
  // Asks the child to end; true if it exited 0.
  bool Quit() {
    if (!WriteBytes(cmd_, "q", 1)) return false;
    return Reap();
  }
  void Kill() {
    kill(pid_, SIGKILL);
    Reap();
  }

 private:
  bool Reap() {
    int status = 0;
    if (waitpid(pid_, &status, 0) != pid_) return false;
    reaped_ = true;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

  [[noreturn]] static void RunChild(const std::string& path, Handler handler,
                                    int cmd, int ack, int ev, int rel) {
    const int fd = NewMemfd(kChildPages);
    uint8_t* base = fd < 0 ? nullptr : MapShared(fd, 0, kChildPages * kPage);
    if (base == nullptr) {
      (void)!write(ack, "E", 1);
      _exit(2);
    }
    std::memset(base, 0x5a, kChildPages * kPage);
    MemoryExport::EventHandler on_event;
    if (handler != Handler::kNone) {
      on_event = [handler, ev, rel](ExportEvent e) {
        if (e == ExportEvent::kPause && handler == Handler::kBlockOnPause) {
          char c;
          (void)!read(rel, &c, 1);
        }
        const char letter = e == ExportEvent::kPause      ? 'P'
                            : e == ExportEvent::kResume   ? 'R'
                            : e == ExportEvent::kMigrated ? 'M'
                                                          : 'D';
        (void)!write(ev, &letter, 1);
      };
    }
    const SharedRegion r{7, "child", base, kChildPages * kPage, fd, 0};
    absl::StatusOr<std::unique_ptr<MemoryExport>> exp =
        MemoryExport::Listen(path, {&r, 1}, on_event);
    if (!exp.ok()) {
      (void)!write(ack, "E", 1);
      _exit(3);
    }
    (void)!write(ack, "L", 1);
    // On the heap: the main thread may exit (ExitMainThread).
    auto* child = new Child{cmd, ack, base, std::move(*exp)};
    Serve(child);
  }

  struct Child {
    int cmd, ack;
    uint8_t* base;
    std::unique_ptr<MemoryExport> exp;
  };

  [[noreturn]] static void Serve(Child* child) {
    const int cmd = child->cmd, ack = child->ack;
    uint8_t* base = child->base;
    std::unique_ptr<MemoryExport>* exp = &child->exp;
    for (;;) {
      char c;
      if (read(cmd, &c, 1) != 1) break;
      if (c == 'w') {
        uint8_t page;
        if (read(cmd, &page, 1) != 1) break;
        base[page * kPage + page] = static_cast<uint8_t>(page + 1);
        (void)!write(ack, "a", 1);
      } else if (c == 't') {
        const int64_t ns = *exp ? (*exp)->paused_at_ns() : -1;
        (void)!write(ack, &ns, sizeof ns);
      } else if (c == 'm') {
        const bool ok = *exp && (*exp)->WaitMigrated(absl::Seconds(10)).ok();
        (void)!write(ack, ok ? "O" : "F", 1);
      } else if (c == 'f') {
        exp->reset();
        (void)!write(ack, "a", 1);
      } else if (c == 'u') {
        munmap(base, kChildPages * kPage);
        (void)!write(ack, "a", 1);
      } else if (c == 'z') {
        std::thread(Serve, child).detach();
        (void)!write(ack, "a", 1);
        // This thread alone, with no unwinding (pthread_exit's would
        // meet the test framework's catch-all on this forked stack).
        syscall(SYS_exit, 0);
      } else if (c == 'q') {
        break;
      }
    }
    exp->reset();  // unlinks the socket
    _exit(0);
  }

  pid_t pid_ = -1;
  bool reaped_ = false;
  int cmd_ = -1, ack_ = -1, events_ = -1, release_ = -1;
};

TEST_F(MemoryHandoffTest, ForkedWorkloadPausesResumesAndMigrates) {
  Workload w(Path("w.sock"), Handler::kRecord);
  ASSERT_GT(w.pid(), 0);
  ASSERT_EQ(w.Started(), 'L');
  auto att = AttachedMemory::Attach(Path("w.sock"), absl::Seconds(10));
  ASSERT_OK(att);
  EXPECT_EQ((*att)->pid(), w.pid());
  EXPECT_TRUE((*att)->pauses_itself());
  ASSERT_EQ((*att)->regions().size(), 1u);
  const Region& region = (*att)->regions()[0];
  EXPECT_EQ(region.id, 7u);
  EXPECT_EQ(region.length, kChildPages * kPage);
  const uint8_t* m = static_cast<const uint8_t*>(region.base);
  EXPECT_EQ(m[kPage + 17], 0x5a);

  ASSERT_TRUE(w.Write(3));
  ASSERT_TRUE(w.Write(11));
  ASSERT_TRUE(w.Write(3));
  DirtyBitmap d(kChildPages);
  DirtyBitmap* dp = &d;
  absl::StatusOr<uint64_t> n = (*att)->CollectWritten({&dp, 1});
  ASSERT_OK(n);
  EXPECT_EQ(*n, 2u);
  EXPECT_THAT(SetPages(d), UnorderedElementsAre(3, 11));
  EXPECT_EQ(m[3 * kPage + 3], 4);
  EXPECT_EQ(m[11 * kPage + 11], 12);
  d.ClearAll();
  n = (*att)->CollectWritten({&dp, 1});
  ASSERT_OK(n);
  EXPECT_EQ(*n, 0u);

  EXPECT_EQ(w.PausedAtNs(), 0);
  const int64_t before = MonotonicNs();
  ASSERT_OK((*att)->Pause(absl::Seconds(10)));
  const int64_t after = MonotonicNs();
  // The handler ran before Pause returned.
  EXPECT_EQ(ReadByte(w.events(), 0), 'P');
  EXPECT_FALSE((*att)->stopped_by_signal());
  EXPECT_TRUE((*att)->pause_note().empty()) << (*att)->pause_note();
  const int64_t paused_at = w.PausedAtNs();
  EXPECT_GE(paused_at, before);
  EXPECT_LE(paused_at, after);
  // A second Pause is a no-op.
  ASSERT_OK((*att)->Pause(absl::Seconds(10)));
  EXPECT_EQ(ReadByte(w.events(), 0), -1);

  ASSERT_OK((*att)->Resume());
  EXPECT_EQ(ReadByte(w.events(), 0), 'R');
  ASSERT_TRUE(w.Write(5));
  n = (*att)->CollectWritten({&dp, 1});
  ASSERT_OK(n);
  EXPECT_THAT(SetPages(d), UnorderedElementsAre(5));

  ASSERT_OK((*att)->Pause(absl::Seconds(10)));
  EXPECT_EQ(ReadByte(w.events(), 0), 'P');
  EXPECT_GE(w.PausedAtNs(), paused_at);
  ASSERT_OK((*att)->Migrated());
  EXPECT_EQ(w.WaitMigrated(), 'O');
  EXPECT_EQ(ReadByte(w.events(), 10000), 'M');
  att->reset();
  EXPECT_TRUE(w.Quit());
}

TEST_F(MemoryHandoffTest, NoHandlerPausesWithSigstopAndResumesWithSigcont) {
  Workload w(Path("w.sock"), Handler::kNone);
  ASSERT_GT(w.pid(), 0);
  ASSERT_EQ(w.Started(), 'L');
  auto att = AttachedMemory::Attach(Path("w.sock"), absl::Seconds(10));
  ASSERT_OK(att);
  EXPECT_FALSE((*att)->pauses_itself());
  ASSERT_OK((*att)->Pause(absl::Seconds(5)));
  EXPECT_TRUE((*att)->stopped_by_signal());
  EXPECT_THAT((*att)->pause_note(), HasSubstr("SIGSTOP"));
  EXPECT_EQ(ProcState(w.pid()), 'T');
  ASSERT_OK((*att)->Resume());
  EXPECT_FALSE((*att)->stopped_by_signal());
  // Running again: it answers, and its write is tracked.
  ASSERT_TRUE(w.Write(2));
  EXPECT_NE(ProcState(w.pid()), 'T');
  DirtyBitmap d(kChildPages);
  DirtyBitmap* dp = &d;
  absl::StatusOr<uint64_t> n = (*att)->CollectWritten({&dp, 1});
  ASSERT_OK(n);
  EXPECT_THAT(SetPages(d), UnorderedElementsAre(2));
  // Migrated: a stopped workload stays stopped; this one runs and is told.
  ASSERT_OK((*att)->Pause(absl::Seconds(5)));
  EXPECT_EQ(ProcState(w.pid()), 'T');
  ASSERT_OK((*att)->Migrated());
  EXPECT_EQ(ProcState(w.pid()), 'T');
  att->reset();
  w.Kill();
  // Killed while stopped: it could not unlink its socket.
  std::filesystem::remove(Path("w.sock"));
}

TEST_F(MemoryHandoffTest, HandlerThatDoesNotAnswerFallsBackToSigstop) {
  Workload w(Path("w.sock"), Handler::kBlockOnPause);
  ASSERT_GT(w.pid(), 0);
  ASSERT_EQ(w.Started(), 'L');
  auto att = AttachedMemory::Attach(Path("w.sock"), absl::Seconds(10));
  ASSERT_OK(att);
  EXPECT_TRUE((*att)->pauses_itself());
  const absl::Time start = absl::Now();
  ASSERT_OK((*att)->Pause(absl::Milliseconds(200)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE((*att)->stopped_by_signal());
  EXPECT_THAT((*att)->pause_note(), HasSubstr("did not pause itself"));
  EXPECT_EQ(ProcState(w.pid()), 'T');
  // The handler returns once resumed; the late PAUSED is skipped and the
  // workload told to resume.
  ASSERT_TRUE(w.Release());
  ASSERT_OK((*att)->Resume());
  EXPECT_EQ(ReadByte(w.events(), 10000), 'P');
  EXPECT_EQ(ReadByte(w.events(), 10000), 'R');
  ASSERT_TRUE(w.Write(1));
  att->reset();
  EXPECT_TRUE(w.Quit());
}

TEST_F(MemoryHandoffTest, DetachWhilePausedTellsTheWorkload) {
  Workload w(Path("w.sock"), Handler::kRecord);
  ASSERT_GT(w.pid(), 0);
  ASSERT_EQ(w.Started(), 'L');
  auto att = AttachedMemory::Attach(Path("w.sock"), absl::Seconds(10));
  ASSERT_OK(att);
  ASSERT_OK((*att)->Pause(absl::Seconds(10)));
  EXPECT_EQ(ReadByte(w.events(), 0), 'P');
  att->reset();
  EXPECT_EQ(ReadByte(w.events(), 10000), 'D');
  // It serves the next migration process, which finds it paused.
  auto again = AttachedMemory::Attach(Path("w.sock"), absl::Seconds(10));
  ASSERT_OK(again);
  again->reset();
  EXPECT_TRUE(w.Quit());
}

// Review D5: a workload whose main thread called pthread_exit (its group
// leader a zombie, its other threads running) is paused by SIGSTOP and its
// writes are still collected. Before: Pause waited for the zombie to stop
// and failed after its timeout, and a collect found the leader's maps
// empty ("cannot read /proc/PID/maps").
TEST_F(MemoryHandoffTest, AWorkloadWhoseMainThreadExitedIsPausedAndTracked) {
  Workload w(Path("w.sock"), Handler::kNone);
  ASSERT_GT(w.pid(), 0);
  ASSERT_EQ(w.Started(), 'L');
  auto att = AttachedMemory::Attach(Path("w.sock"), absl::Seconds(10));
  ASSERT_OK(att);
  ASSERT_TRUE(w.ExitMainThread());
  for (int i = 0; i < 1000 && ProcState(w.pid()) != 'Z'; ++i) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_EQ(ProcState(w.pid()), 'Z') << "the leader did not exit";
  ASSERT_TRUE(w.Write(6));
  DirtyBitmap d(kChildPages);
  DirtyBitmap* dp = &d;
  absl::StatusOr<uint64_t> n = (*att)->CollectWritten({&dp, 1});
  ASSERT_OK(n);
  EXPECT_THAT(SetPages(d), UnorderedElementsAre(6));
  const absl::Status paused = (*att)->Pause(absl::Seconds(2));
  ASSERT_OK(paused);
  EXPECT_TRUE((*att)->stopped_by_signal());
  ASSERT_OK((*att)->Resume());
  ASSERT_TRUE(w.Write(9)) << "the workload runs again";
  d.ClearAll();
  n = (*att)->CollectWritten({&dp, 1});
  ASSERT_OK(n);
  EXPECT_THAT(SetPages(d), UnorderedElementsAre(9));
  att->reset();
  EXPECT_TRUE(w.Quit());
}

TEST_F(MemoryHandoffTest, WorkloadDiedCollectFails) {
  Workload w(Path("w.sock"), Handler::kRecord);
  ASSERT_GT(w.pid(), 0);
  ASSERT_EQ(w.Started(), 'L');
  auto att = AttachedMemory::Attach(Path("w.sock"), absl::Seconds(10));
  ASSERT_OK(att);
  const pid_t pid = w.pid();
  w.Kill();
  // The killed child could not unlink its socket.
  std::filesystem::remove(Path("w.sock"));
  DirtyBitmap d(kChildPages);
  DirtyBitmap* dp = &d;
  absl::StatusOr<uint64_t> n = (*att)->CollectWritten({&dp, 1});
  ASSERT_THAT(n, StatusIs(absl::StatusCode::kUnavailable,
                          HasSubstr("did it end, or free its export?")));
  EXPECT_THAT(n.status().message(), HasSubstr(absl::StrCat("pid ", pid)));
  // Pausing a process that is gone is an error too, not a crash.
  EXPECT_THAT(
      (*att)->Pause(absl::Milliseconds(200)),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("No such process")));
}

TEST_F(MemoryHandoffTest, WorkloadFreedItsExportCollectFails) {
  Workload w(Path("w.sock"), Handler::kRecord);
  ASSERT_GT(w.pid(), 0);
  ASSERT_EQ(w.Started(), 'L');
  auto att = AttachedMemory::Attach(Path("w.sock"), absl::Seconds(10));
  ASSERT_OK(att);
  ASSERT_TRUE(w.FreeExport());
  ASSERT_TRUE(w.Write(4));
  DirtyBitmap d(kChildPages);
  DirtyBitmap* dp = &d;
  absl::StatusOr<uint64_t> n = (*att)->CollectWritten({&dp, 1});
  EXPECT_THAT(n, StatusIs(absl::StatusCode::kFailedPrecondition,
                          HasSubstr("did it end, or free its export?")))
      << "collected " << *n << " pages from an export the workload freed";
  att->reset();
  EXPECT_TRUE(w.Quit());
}

// ---- hand-over and adoption ----

// A workload that unmaps (or moves) its exported memory can no longer be
// tracked: PAGEMAP_SCAN would report nothing and no error from then on, so
// every later write would be missed; the next collect fails instead
// (review D5).
TEST_F(MemoryHandoffTest, WorkloadUnmappedItsMemoryCollectFails) {
  Workload w(Path("w.sock"), Handler::kRecord);
  ASSERT_GT(w.pid(), 0);
  ASSERT_EQ(w.Started(), 'L');
  auto att = AttachedMemory::Attach(Path("w.sock"), absl::Seconds(10));
  ASSERT_OK(att);
  DirtyBitmap d(kChildPages);
  DirtyBitmap* dp = &d;
  ASSERT_OK((*att)->CollectWritten({&dp, 1}));
  ASSERT_TRUE(w.Unmap());
  absl::StatusOr<uint64_t> n = (*att)->CollectWritten({&dp, 1});
  ASSERT_THAT(n, StatusIs(absl::StatusCode::kFailedPrecondition,
                          HasSubstr("is no longer mapped at")));
  EXPECT_THAT(n.status().message(), HasSubstr("no longer mapped"));
  att->reset();
  EXPECT_TRUE(w.Quit());
}

// Review D5: no seal outlives the migration, and a workload that shrinks
// its file under the offered range ends the migration with that cause at
// the next collect, before a read of the lost pages could fault.
TEST_F(MemoryHandoffTest, WorkloadShrankItsFileCollectFailsAndNoSealStays) {
  const int fd = memfd_create("shrinks", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4 * kPage), 0);
  uint8_t* base = MapShared(fd, 0, 4 * kPage);
  ASSERT_NE(base, nullptr);
  const SharedRegion r{1, "r", base, 4 * kPage, fd, 0};
  auto exp = MemoryExport::Listen(Path("s.sock"), {&r, 1}, nullptr);
  ASSERT_OK(exp);
  auto att = AttachedMemory::Attach(Path("s.sock"), absl::Seconds(10));
  ASSERT_OK(att);
  EXPECT_EQ(fcntl(fd, F_GET_SEALS) & F_SEAL_SHRINK, 0);
  DirtyBitmap d(4);
  DirtyBitmap* dp = &d;
  ASSERT_OK((*att)->CollectWritten({&dp, 1}));
  ASSERT_EQ(ftruncate(fd, kPage), 0);
  absl::StatusOr<uint64_t> n = (*att)->CollectWritten({&dp, 1});
  ASSERT_THAT(n, StatusIs(absl::StatusCode::kFailedPrecondition,
                          HasSubstr("those pages are gone")));
  EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(n.status().message(), HasSubstr("shrank region 1's file"));
  att->reset();
  exp->reset();
  munmap(base, 4 * kPage);
  close(fd);
}

TEST_F(HandOverTest, HandOverAndAdoptShareTheBytes) {
  const int fd = NewMemfd(6);
  uint8_t* base = MapShared(fd, 0, 6 * kPage);
  ASSERT_NE(base, nullptr);
  for (uint64_t i = 0; i < 6 * kPage; ++i)
    base[i] = static_cast<uint8_t>(i * 7);
  auto adopt = AdoptedMemory::Listen(Path("adopt.sock"));
  ASSERT_OK(adopt);
  absl::Status waited;
  std::thread t([&] { waited = (*adopt)->Wait(absl::Seconds(20)); });
  const SharedRegion regions[] = {
      {1, "one", base, 2 * kPage, fd, 0},
      {2, "two", base + 2 * kPage, 3 * kPage, fd, 3 * kPage}};
  absl::Status s =
      HandOverMemory(Path("adopt.sock"), regions, absl::Seconds(10));
  t.join();
  ASSERT_OK(s);
  ASSERT_OK(waited);
  // Gone once adopted.
  EXPECT_FALSE(std::filesystem::exists(Path("adopt.sock")));
  absl::Span<const SharedRegion> got = (*adopt)->regions();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].id, 1u);
  EXPECT_EQ(got[0].name, "one");
  EXPECT_EQ(got[1].id, 2u);
  EXPECT_EQ(got[1].length, 3 * kPage);
  EXPECT_EQ(got[1].fd_offset, 3 * kPage);
  EXPECT_GE(got[0].fd, 0);
  EXPECT_NE(got[0].fd, fd);
  EXPECT_EQ(std::memcmp(got[0].base, base, 2 * kPage), 0);
  EXPECT_EQ(std::memcmp(got[1].base, base + 3 * kPage, 3 * kPage), 0);
  // Writes through the adopter's mapping land in the original memfd.
  static_cast<uint8_t*>(got[1].base)[kPage + 1] = 0xee;
  uint8_t byte = 0;
  ASSERT_EQ(pread(fd, &byte, 1, 4 * kPage + 1), 1);
  EXPECT_EQ(byte, 0xee);
  // Wait again is OK at once.
  EXPECT_OK((*adopt)->Wait(absl::ZeroDuration()));
  adopt->reset();
  munmap(base, 6 * kPage);
  close(fd);
}

TEST_F(HandOverTest, AdopterRefusesShortFdAndKeepsWaiting) {
  const int small = NewMemfd(1);
  const int good = NewMemfd(4);
  ASSERT_GE(small, 0);
  ASSERT_GE(good, 0);
  ASSERT_EQ(pwrite(good, "abc", 3, kPage), 3);
  auto adopt = AdoptedMemory::Listen(Path("adopt.sock"));
  ASSERT_OK(adopt);
  absl::Status waited;
  std::thread t([&] { waited = (*adopt)->Wait(absl::Seconds(30)); });
  const SharedRegion too_short{
      1, "r", reinterpret_cast<void*>(0x100000), 4 * kPage, small, 0};
  absl::Status s =
      HandOverMemory(Path("adopt.sock"), {&too_short, 1}, absl::Seconds(10));
  EXPECT_THAT(s,
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("the peer closed the hand-off connection")));
  EXPECT_THAT(s.message(), HasSubstr("refused"));
  const SharedRegion right{1,         "r",  reinterpret_cast<void*>(0x100000),
                           4 * kPage, good, 0};
  s = HandOverMemory(Path("adopt.sock"), {&right, 1}, absl::Seconds(10));
  t.join();
  EXPECT_OK(s);
  ASSERT_OK(waited);
  ASSERT_EQ((*adopt)->regions().size(), 1u);
  EXPECT_EQ(
      std::memcmp(static_cast<uint8_t*>((*adopt)->regions()[0].base) + kPage,
                  "abc", 3),
      0);
  adopt->reset();
  close(small);
  close(good);
}

TEST_F(HandOverTest, AdoptWaitTimesOut) {
  auto adopt = AdoptedMemory::Listen(Path("adopt.sock"));
  ASSERT_OK(adopt);
  const absl::Time start = absl::Now();
  absl::Status s = (*adopt)->Wait(absl::Milliseconds(150));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(140));
  EXPECT_TRUE((*adopt)->regions().empty());
  // Destroying it removes the socket (TearDown checks).
}

TEST_F(HandOverTest, HandOverToNobodyFails) {
  const int fd = NewMemfd(1);
  const SharedRegion r{1, "r", reinterpret_cast<void*>(0x100000), kPage, fd, 0};
  const absl::Time start = absl::Now();
  EXPECT_THAT(
      HandOverMemory(Path("none.sock"), {&r, 1}, absl::Milliseconds(200)),
      StatusIs(absl::StatusCode::kUnavailable,
               HasSubstr("No such file or directory")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // Not even encodable: refused before connecting.
  const SharedRegion bad{1,     "r", reinterpret_cast<void*>(0x100001),
                         kPage, fd,  0};
  EXPECT_EQ(
      HandOverMemory(Path("none.sock"), {&bad, 1}, absl::Seconds(1)).code(),
      absl::StatusCode::kInvalidArgument);
  close(fd);
}

// ---- bad input on the socket ----

// The library's own socket calls carry what the tests craft: they check
// nothing of what they send.
int RawConnect(const std::string& path) {
  absl::StatusOr<base::OwnedFd> fd =
      handoff::ConnectSeqpacket(path, absl::Seconds(10));
  return fd.ok() ? fd->Release() : -1;
}

bool RawSend(int sock, const std::vector<uint8_t>& bytes,
             const std::vector<int>& fds) {
  return handoff::SendPacket(sock, bytes, fds).ok();
}

// What the peer answers within 15 s: 0 bytes when it closes.
ssize_t RawReceive(int sock, std::vector<uint8_t>* out) {
  pollfd p{sock, POLLIN, 0};
  if (poll(&p, 1, 15000) != 1) return -1;
  out->resize(4096);
  const ssize_t n = recv(sock, out->data(), out->size(), 0);
  out->resize(n > 0 ? n : 0);
  return n;
}

std::vector<uint8_t> HandOverOffer(uint32_t regions, uint64_t pages = 1) {
  proto::Offer o;
  o.kind = proto::OfferKind::kHandOver;
  o.pid = static_cast<uint32_t>(getpid());
  for (uint32_t i = 0; i < regions; ++i) {
    o.regions.push_back(
        {i + 1, 0x100000 + i * 0x100000ull, pages * kPage, 0, "r"});
  }
  return *proto::EncodeOffer(o);
}

TEST_F(HandOverTest, AdopterRefusesBadOffersWithoutCrashing) {
  auto adopt = AdoptedMemory::Listen(Path("adopt.sock"));
  ASSERT_OK(adopt);
  absl::Status waited;
  std::thread t([&] { waited = (*adopt)->Wait(absl::Seconds(60)); });
  const int memfd = NewMemfd(2);
  int pfd[2];
  ASSERT_EQ(pipe2(pfd, O_CLOEXEC), 0);
  proto::Offer export_offer;
  export_offer.kind = proto::OfferKind::kExport;
  export_offer.regions.push_back({1, 0x100000, kPage, 0, "r"});
  struct Case {
    const char* what;
    std::vector<uint8_t> bytes;
    std::vector<int> fds;
  };
  const std::vector<Case> cases = {
      {"garbage", {1, 2, 3, 4, 5, 6, 7, 8, 9}, {}},
      {"empty-ish", {0}, {memfd}},
      {"no descriptor", HandOverOffer(1), {}},
      {"one descriptor too many", HandOverOffer(1), {memfd, memfd}},
      {"too few for two regions", HandOverOffer(2), {memfd}},
      {"a pipe", HandOverOffer(1), {pfd[0]}},
      {"an export's offer",
       *proto::EncodeOffer(export_offer),
       {memfd, memfd, memfd}},
      {"a longer region than the file", HandOverOffer(1, 3), {memfd}},
      {"too many descriptors", HandOverOffer(1),
       std::vector<int>(proto::kMaxHandoffRegions + 1, memfd)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const int sock = RawConnect(Path("adopt.sock"));
    ASSERT_GE(sock, 0);
    ASSERT_TRUE(RawSend(sock, c.bytes, c.fds));
    std::vector<uint8_t> reply;
    // Refused: closed without ADOPTED.
    EXPECT_EQ(RawReceive(sock, &reply), 0);
    close(sock);
  }
  // Still waiting, and a real hand-over succeeds.
  const SharedRegion r{1,         "r",   reinterpret_cast<void*>(0x100000),
                       2 * kPage, memfd, 0};
  absl::Status s =
      HandOverMemory(Path("adopt.sock"), {&r, 1}, absl::Seconds(10));
  t.join();
  EXPECT_OK(s);
  EXPECT_OK(waited);
  adopt->reset();
  close(memfd);
  close(pfd[0]);
  close(pfd[1]);
}

// A fake export: listens at `path`, sends one crafted offer with `fds` to
// the first connection, then waits for it to close.
class FakeExport {
 public:
  FakeExport(const std::string& path, std::vector<uint8_t> offer,
             std::vector<int> fds)
      : path_(path) {
    listener_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    if (bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        listen(listener_, 4) != 0) {
      return;
    }
    thread_ =
        std::thread([this, offer = std::move(offer), fds = std::move(fds)] {
          pollfd p{listener_, POLLIN, 0};
          if (poll(&p, 1, 15000) != 1) return;
          const int conn = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
          if (conn < 0) return;
          RawSend(conn, offer, fds);
          std::vector<uint8_t> ignored;
          RawReceive(conn, &ignored);
          close(conn);
        });
  }
  ~FakeExport() {
    if (thread_.joinable()) thread_.join();
    close(listener_);
    unlink(path_.c_str());
  }

 private:
  std::string path_;
  int listener_ = -1;
  std::thread thread_;
};

std::vector<uint8_t> ExportOffer(uint64_t base, uint64_t length) {
  proto::Offer o;
  o.kind = proto::OfferKind::kExport;
  o.flags = proto::kOfferPausesItself;
  o.pid = static_cast<uint32_t>(getpid());
  o.regions.push_back({1, base, length, 0, "fake"});
  return *proto::EncodeOffer(o);
}

TEST_F(MemoryHandoffTest, AttachRefusesAnotherProcesssPagemap) {
  // Another live process, whose pagemap a fake export passes off as its
  // own.
  int gate[2];
  ASSERT_EQ(pipe2(gate, O_CLOEXEC), 0);
  const pid_t other = fork();
  ASSERT_GE(other, 0);
  if (other == 0) {
    close(gate[1]);
    char c;
    (void)!read(gate[0], &c, 1);
    _exit(0);
  }
  close(gate[0]);
  const int foreign = open(absl::StrCat("/proc/", other, "/pagemap").c_str(),
                           O_RDONLY | O_CLOEXEC);
  const int memfd = NewMemfd(1);
  ASSERT_GE(foreign, 0);
  {
    FakeExport fake(Path("fake.sock"), ExportOffer(0x100000, kPage),
                    {foreign, memfd});
    auto att = AttachedMemory::Attach(Path("fake.sock"), absl::Seconds(10));
    ASSERT_THAT(att, StatusIs(absl::StatusCode::kInvalidArgument,
                              HasSubstr("the memory offer's pagemap is")));
    EXPECT_EQ(att.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(att.status().message(), HasSubstr("pagemap"));
    EXPECT_THAT(att.status().message(),
                HasSubstr(absl::StrCat("/proc/", other, "/pagemap")));
  }
  close(gate[1]);
  waitpid(other, nullptr, 0);
  close(foreign);
  close(memfd);
}

// An export gives an attacher what it needs and no more (review D3): its
// pagemap and each region's file opened read-only, never its userfaultfd,
// with which any process of the user could register and fill any range of
// the workload's memory.
TEST_F(MemoryHandoffTest, AnExportSendsItsPagemapAndReadOnlyFilesOnly) {
  const int memfd = NewMemfd(4);
  ASSERT_GE(memfd, 0);
  uint8_t* base = MapShared(memfd, 0, 4 * kPage);
  ASSERT_NE(base, nullptr);
  const SharedRegion r{3, "r", base, 4 * kPage, memfd, 0};
  auto exp = MemoryExport::Listen(Path("w.sock"), {&r, 1}, nullptr);
  ASSERT_OK(exp);
  {
    absl::StatusOr<base::OwnedFd> conn =
        handoff::ConnectSeqpacket(Path("w.sock"), absl::Seconds(10));
    ASSERT_OK(conn);
    absl::StatusOr<handoff::Packet> offer = handoff::ReceivePacket(
        conn->get(), proto::kMaxOfferBytes, 16, absl::Seconds(10));
    ASSERT_OK(offer);
    ASSERT_EQ(offer->fds.size(), 2u);  // pagemap, the region's file
    EXPECT_EQ(FdTarget(offer->fds[0].get()),
              absl::StrCat("/proc/", getpid(), "/pagemap"));
    EXPECT_EQ(fcntl(offer->fds[1].get(), F_GETFL) & O_ACCMODE, O_RDONLY);
    EXPECT_THAT(FdTarget(offer->fds[1].get()), HasSubstr("memfd:"));
    for (const base::OwnedFd& fd : offer->fds) {
      EXPECT_NE(FdTarget(fd.get()), "anon_inode:[userfaultfd]");
    }
  }
  exp->reset();
  munmap(base, 4 * kPage);
  close(memfd);
}

// The attacher in a pid namespace that cannot see the workload (a
// container beside it): the kernel reports the workload's pid as 0, and a
// signal to pid 0 would stop the attacher's own process group (review D1,
// which stopped the tool and the `timeout` around it). It is refused, and
// nothing is stopped.
TEST_F(MemoryHandoffTest, AnAttacherThatCannotSeeTheWorkloadsPidIsRefused) {
  Workload w(Path("w.sock"), Handler::kNone);
  ASSERT_GT(w.pid(), 0);
  ASSERT_EQ(w.Started(), 'L');
  int result[2];
  ASSERT_EQ(pipe2(result, O_CLOEXEC), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(result[0]);
    if (unshare(CLONE_NEWPID) != 0) {
      (void)!write(result[1], "S", 1);  // no CAP_SYS_ADMIN
      _exit(0);
    }
    const pid_t inner = fork();  // pid 1 of the new namespace
    if (inner == 0) {
      auto att = AttachedMemory::Attach(Path("w.sock"), absl::Seconds(10));
      const char verdict =
          att.ok()                                                     ? 'A'
          : absl::StrContains(att.status().message(), "pid namespace") ? 'R'
                                                                       : 'E';
      (void)!write(result[1], &verdict, 1);
      _exit(0);
    }
    int status = 0;
    waitpid(inner, &status, 0);
    _exit(0);
  }
  close(result[1]);
  const int verdict = ReadByte(result[0], 20000);
  close(result[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  if (verdict == 'S') GTEST_SKIP() << "unshare(CLONE_NEWPID) needs root";
  EXPECT_EQ(verdict, 'R') << "A: attached; E: refused for another reason";
  EXPECT_EQ(WIFSTOPPED(status), false);
  // Nothing was stopped: the workload answers.
  EXPECT_NE(ProcState(w.pid()), 'T');
  EXPECT_TRUE(w.Write(1));
  EXPECT_TRUE(w.Quit());
}

// A connector checks who listens (review D2): a process of another user
// that bound the path first gets neither an attacher nor the memory of a
// hand-over.
TEST_F(MemoryHandoffTest, ASquatterOfAnotherUserGetsNothing) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to listen as another user";
  const std::string path = Path("squat.sock");
  int ready[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  const pid_t squatter = fork();
  ASSERT_GE(squatter, 0);
  if (squatter == 0) {
    close(ready[0]);
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    // Bound as root (the test's directory is root's), listening as nobody:
    // SO_PEERCRED records who called listen.
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        setresgid(65534, 65534, 65534) != 0 ||
        setresuid(65534, 65534, 65534) != 0 || listen(fd, 4) != 0) {
      (void)!write(ready[1], "E", 1);
      _exit(1);
    }
    (void)!write(ready[1], "L", 1);
    for (;;) {
      const int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) _exit(0);
      std::vector<uint8_t> got;
      RawReceive(c, &got);
      (void)!write(ready[1], got.empty() ? "n" : "G", 1);  // G: got bytes
      close(c);
    }
  }
  close(ready[1]);
  ASSERT_EQ(ReadByte(ready[0], 10000), 'L');
  auto att = AttachedMemory::Attach(path, absl::Seconds(2));
  ASSERT_THAT(
      att,
      StatusIs(
          absl::StatusCode::kPermissionDenied,
          HasSubstr("put the socket in a directory only this user can write")));
  EXPECT_EQ(att.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(att.status().message(), HasSubstr("uid 65534"));

  const int memfd = NewMemfd(2);
  uint8_t* base = MapShared(memfd, 0, 2 * kPage);
  const SharedRegion r{1, "r", base, 2 * kPage, memfd, 0};
  absl::Status handed = HandOverMemory(path, {&r, 1}, absl::Seconds(2));
  EXPECT_EQ(handed.code(), absl::StatusCode::kPermissionDenied) << handed;
  // The squatter saw connections, never a byte.
  kill(squatter, SIGKILL);
  waitpid(squatter, nullptr, 0);
  std::string seen;
  for (int c = ReadByte(ready[0], 100); c >= 0; c = ReadByte(ready[0], 100)) {
    seen.push_back(static_cast<char>(c));
  }
  EXPECT_EQ(seen.find('G'), std::string::npos) << seen;
  close(ready[0]);
  munmap(base, 2 * kPage);
  close(memfd);
  unlink(path.c_str());
}

TEST_F(MemoryHandoffTest, AttachRefusesBadOffers) {
  const int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  const int memfd = NewMemfd(1);
  proto::Offer handover;
  handover.kind = proto::OfferKind::kHandOver;
  handover.regions.push_back({1, 0x100000, kPage, 0, "r"});
  struct Case {
    const char* what;
    std::vector<uint8_t> bytes;
    std::vector<int> fds;
    const char* says;
    // A malformed offer is bad input; a well-formed one naming memory the
    // offerer does not track fails the attacher's precondition.
    absl::StatusCode code = absl::StatusCode::kInvalidArgument;
  };
  const std::vector<Case> cases = {
      {"wrong fd count",
       ExportOffer(0x100000, kPage),
       {pagemap},
       "descriptors"},
      // This process's own pagemap, but the offered address is not mapped
      // here, let alone tracked: PAGEMAP_SCAN alone would report nothing
      // and no error, and every write would be missed.
      {"a range the offerer does not track",
       ExportOffer(0x100000, kPage),
       {pagemap, memfd},
       "not registered for write tracking",
       absl::StatusCode::kFailedPrecondition},
      {"a hand-over", *proto::EncodeOffer(handover), {memfd}, "hands over"},
      {"garbage", {1, 2, 3}, {}, "magic"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    FakeExport fake(Path("fake.sock"), c.bytes, c.fds);
    EXPECT_THAT(AttachedMemory::Attach(Path("fake.sock"), absl::Seconds(10)),
                StatusIs(c.code, HasSubstr(c.says)));
  }
  close(pagemap);
  close(memfd);
}

// ---- MemoryExport::Listen's own checks ----

TEST_F(MemoryHandoffTest, ListenRefusesBadRegions) {
  const int fd = NewMemfd(4);
  uint8_t* base = MapShared(fd, 0, 4 * kPage);
  ASSERT_NE(base, nullptr);
  auto code = [&](const SharedRegion& r) {
    auto exp = MemoryExport::Listen(Path("bad.sock"), {&r, 1}, nullptr);
    return exp.status().code();
  };
  EXPECT_EQ(code({1, "r", base, 4 * kPage, -1, 0}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({1, "r", base + 1, 4 * kPage, fd, 0}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({1, "r", base, 4 * kPage - 1, fd, 0}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({1, "r", base, 4 * kPage, fd, kPage}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({1, "r", base, 8 * kPage, fd, 0}),
            absl::StatusCode::kInvalidArgument);
  int pfd[2];
  ASSERT_EQ(pipe2(pfd, O_CLOEXEC), 0);
  EXPECT_EQ(code({1, "r", base, 4 * kPage, pfd[0], 0}),
            absl::StatusCode::kInvalidArgument);
  close(pfd[0]);
  close(pfd[1]);
  EXPECT_FALSE(std::filesystem::exists(Path("bad.sock")));
  // And a good one, after all that, works (nothing was left registered).
  const SharedRegion good{1, "r", base, 4 * kPage, fd, 0};
  auto exp = MemoryExport::Listen(Path("good.sock"), {&good, 1}, nullptr);
  EXPECT_OK(exp);
  exp->reset();
  munmap(base, 4 * kPage);
  close(fd);
}

TEST_F(MemoryHandoffTest, ListenRefusesALivePathAndReplacesAStaleOne) {
  const int fd = NewMemfd(2);
  uint8_t* b1 = MapShared(fd, 0, kPage);
  uint8_t* b2 = MapShared(fd, kPage, kPage);
  ASSERT_TRUE(b1 && b2);
  const SharedRegion r1{1, "a", b1, kPage, fd, 0};
  const SharedRegion r2{2, "b", b2, kPage, fd, kPage};
  auto first = MemoryExport::Listen(Path("e.sock"), {&r1, 1}, nullptr);
  ASSERT_OK(first);
  auto second = MemoryExport::Listen(Path("e.sock"), {&r2, 1}, nullptr);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists)
      << second.status();
  auto adopter = AdoptedMemory::Listen(Path("e.sock"));
  EXPECT_EQ(adopter.status().code(), absl::StatusCode::kAlreadyExists);
  // The first still serves.
  auto att = AttachedMemory::Attach(Path("e.sock"), absl::Seconds(10));
  EXPECT_OK(att);
  att->reset();
  first->reset();
  EXPECT_FALSE(std::filesystem::exists(Path("e.sock")));

  // A socket file whose listener closed without unlinking: replaced.
  {
    const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, Path("stale.sock").c_str(), sizeof a.sun_path - 1);
    ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(listen(s, 1), 0);
    close(s);
  }
  ASSERT_TRUE(std::filesystem::exists(Path("stale.sock")));
  auto replaced = MemoryExport::Listen(Path("stale.sock"), {&r2, 1}, nullptr);
  ASSERT_OK(replaced);
  att = AttachedMemory::Attach(Path("stale.sock"), absl::Seconds(10));
  EXPECT_OK(att);
  att->reset();
  replaced->reset();
  // A regular file at the path is not a socket to replace.
  { std::ofstream(Path("file.sock")) << "x"; }
  auto on_file = AdoptedMemory::Listen(Path("file.sock"));
  EXPECT_THAT(on_file, StatusIs(absl::StatusCode::kUnavailable,
                                HasSubstr("Connection refused")));
  std::filesystem::remove(Path("file.sock"));
  munmap(b1, kPage);
  munmap(b2, kPage);
  close(fd);
}

// ---- WriteTracker ----

TEST_F(MemoryHandoffTest, WriteTrackerOnAnonymousMemory) {
  constexpr uint64_t kPages = 32;
  void* p = mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  uint8_t* base = static_cast<uint8_t*>(p);
  base[kPage] = 1;  // before tracking
  absl::StatusOr<std::unique_ptr<WriteTracker>> t =
      WriteTracker::Track(base, kPages * kPage);
  ASSERT_OK(t);
  DirtyBitmap d(kPages);
  absl::StatusOr<uint64_t> n = (*t)->Collect(d);
  ASSERT_OK(n);
  d.ClearAll();
  base[2 * kPage] = 1;
  base[31 * kPage + 4095] = 1;
  base[kPage] = 2;
  n = (*t)->Collect(d);
  ASSERT_OK(n);
  EXPECT_EQ(*n, 3u);
  EXPECT_THAT(SetPages(d), UnorderedElementsAre(1, 2, 31));
  d.ClearAll();
  n = (*t)->Collect(d);
  ASSERT_OK(n);
  EXPECT_EQ(*n, 0u);
  EXPECT_EQ(d.Count(), 0u);
  base[2 * kPage + 5] = 3;  // re-armed: reported again
  n = (*t)->Collect(d);
  ASSERT_OK(n);
  EXPECT_EQ(*n, 1u);
  EXPECT_THAT(SetPages(d), UnorderedElementsAre(2));
  t->reset();
  munmap(p, kPages * kPage);
}

// A bitmap smaller than the tracked range cannot hold every written page:
// Collect must refuse it (as AttachedMemory::CollectWritten does) rather
// than re-arm a page it could not report, which loses that write.
TEST_F(MemoryHandoffTest, WriteTrackerRefusesAWrongSizeBitmap) {
  constexpr uint64_t kPages = 32;
  void* p = mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  uint8_t* base = static_cast<uint8_t*>(p);
  absl::StatusOr<std::unique_ptr<WriteTracker>> t =
      WriteTracker::Track(base, kPages * kPage);
  ASSERT_OK(t);
  base[30 * kPage] = 1;
  DirtyBitmap small(4);
  absl::StatusOr<uint64_t> n = (*t)->Collect(small);
  EXPECT_THAT(n,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a bitmap of 4 pages for 32 tracked pages")))
      << "reported " << *n << " pages into a 4-page bitmap";
  if (n.ok()) {
    // The write to page 30 is gone: the next Collect does not report it.
    DirtyBitmap full(kPages);
    absl::StatusOr<uint64_t> again = (*t)->Collect(full);
    ASSERT_OK(again);
    EXPECT_TRUE(full.Test(30)) << "the write to page 30 was lost";
  }
  t->reset();
  munmap(p, kPages * kPage);
}

// ---- the C API ----

struct CEvents {
  std::atomic<int> pause{0}, resume{0}, migrated{0};
};
void OnCEvent(void* user, ramferry_export_event e) {
  auto* ev = static_cast<CEvents*>(user);
  if (e == RAMFERRY_EXPORT_PAUSE) ++ev->pause;
  if (e == RAMFERRY_EXPORT_RESUME) ++ev->resume;
  if (e == RAMFERRY_EXPORT_MIGRATED) ++ev->migrated;
}

TEST_F(MemoryHandoffTest, CApiExportAttachHandOverAdopt) {
  const int fd = NewMemfd(8);
  uint8_t* base = MapShared(fd, 0, 8 * kPage);
  ASSERT_NE(base, nullptr);
  ramferry_shared_regions* regions = ramferry_shared_regions_new();
  ASSERT_NE(regions, nullptr);
  ASSERT_EQ(ramferry_shared_regions_add(regions, 4, base, 8 * kPage, fd, 0),
            RAMFERRY_OK);
  CEvents ev;
  ramferry_export* exp = nullptr;
  const std::string path = Path("c.sock");
  ASSERT_EQ(ramferry_export_listen(path.c_str(), regions, OnCEvent, &ev, &exp),
            RAMFERRY_OK)
      << ramferry_last_error();
  ramferry_attach* att = nullptr;
  ASSERT_EQ(ramferry_attach_open(path.c_str(), 10000, &att), RAMFERRY_OK)
      << ramferry_last_error();
  size_t count = 0;
  ASSERT_EQ(ramferry_attach_region_count(att, &count), RAMFERRY_OK);
  ASSERT_EQ(count, 1u);
  uint32_t id = 0;
  void* mapped = nullptr;
  uint64_t length = 0;
  ASSERT_EQ(ramferry_attach_region(att, 0, &id, &mapped, &length), RAMFERRY_OK);
  EXPECT_EQ(id, 4u);
  EXPECT_EQ(length, 8 * kPage);
  EXPECT_EQ(ramferry_attach_region(att, 1, &id, &mapped, &length),
            RAMFERRY_OUT_OF_RANGE);

  base[6 * kPage] = 0x66;
  std::vector<uint64_t> words(ramferry_bitmap_words(8), 0);
  uint64_t* const bitmaps[] = {words.data()};
  uint64_t reported = 0;
  ASSERT_EQ(ramferry_attach_collect(att, bitmaps, 1, &reported), RAMFERRY_OK)
      << ramferry_attach_last_error(att);
  EXPECT_EQ(reported, 1u);
  EXPECT_EQ(words[0], uint64_t{1} << 6);
  EXPECT_EQ(static_cast<uint8_t*>(mapped)[6 * kPage], 0x66);
  EXPECT_EQ(ramferry_attach_collect(att, bitmaps, 2, &reported),
            RAMFERRY_INVALID_ARGUMENT);

  ASSERT_EQ(ramferry_attach_pause(att, 5000), RAMFERRY_OK);
  EXPECT_EQ(ev.pause.load(), 1);
  int64_t ns = 0;
  ASSERT_EQ(ramferry_export_paused_at_ns(exp, &ns), RAMFERRY_OK);
  EXPECT_GT(ns, 0);
  ASSERT_EQ(ramferry_attach_resume(att), RAMFERRY_OK);
  EXPECT_EQ(ev.resume.load(), 1);
  EXPECT_EQ(ramferry_export_wait_migrated(exp, 10), RAMFERRY_DEADLINE_EXCEEDED);
  ASSERT_EQ(ramferry_attach_migrated(att), RAMFERRY_OK);
  EXPECT_EQ(ramferry_export_wait_migrated(exp, 10000), RAMFERRY_OK);
  EXPECT_EQ(ev.migrated.load(), 1);
  ramferry_attach_free(att);
  ramferry_export_free(exp);

  // Hand the memory over to an adopter.
  ramferry_adopt* adopt = nullptr;
  const std::string apath = Path("a.sock");
  ASSERT_EQ(ramferry_adopt_listen(apath.c_str(), &adopt), RAMFERRY_OK);
  ramferry_status waited = RAMFERRY_OK;
  std::thread t([&] { waited = ramferry_adopt_wait(adopt, 20000); });
  const ramferry_status handed =
      ramferry_hand_over_memory(apath.c_str(), regions, 10000);
  t.join();
  ASSERT_EQ(handed, RAMFERRY_OK) << ramferry_last_error();
  ASSERT_EQ(waited, RAMFERRY_OK) << ramferry_adopt_last_error(adopt);
  ASSERT_EQ(ramferry_adopt_region_count(adopt, &count), RAMFERRY_OK);
  ASSERT_EQ(count, 1u);
  int afd = -1;
  ASSERT_EQ(ramferry_adopt_region(adopt, 0, &id, &mapped, &length, &afd),
            RAMFERRY_OK);
  EXPECT_EQ(id, 4u);
  EXPECT_GE(afd, 0);
  EXPECT_EQ(static_cast<uint8_t*>(mapped)[6 * kPage], 0x66);
  ramferry_adopt_free(adopt);
  ramferry_shared_regions_free(regions);
  munmap(base, 8 * kPage);
  close(fd);
}

// Review E1: "done" is a natural place to free the export, and the
// handler runs on the export's own thread, which cannot join itself
// (before: std::terminate from the destructor's join).
struct SelfFreeing {
  ramferry_export* exp = nullptr;
  std::atomic<bool> freed{false};
};
void FreeOnMigrated(void* user, ramferry_export_event e) {
  auto* s = static_cast<SelfFreeing*>(user);
  if (e != RAMFERRY_EXPORT_MIGRATED) return;
  ramferry_export_free(s->exp);
  s->freed = true;
}

TEST_F(MemoryHandoffTest, CApiAHandlerMayFreeItsOwnExport) {
  const int fd = NewMemfd(2);
  uint8_t* base = MapShared(fd, 0, 2 * kPage);
  ASSERT_NE(base, nullptr);
  ramferry_shared_regions* regions = ramferry_shared_regions_new();
  ASSERT_EQ(ramferry_shared_regions_add(regions, 1, base, 2 * kPage, fd, 0),
            RAMFERRY_OK);
  SelfFreeing s;
  const std::string path = Path("self.sock");
  ASSERT_EQ(
      ramferry_export_listen(path.c_str(), regions, FreeOnMigrated, &s, &s.exp),
      RAMFERRY_OK)
      << ramferry_last_error();
  ramferry_attach* att = nullptr;
  ASSERT_EQ(ramferry_attach_open(path.c_str(), 10000, &att), RAMFERRY_OK)
      << ramferry_last_error();
  ASSERT_EQ(ramferry_attach_migrated(att), RAMFERRY_OK)
      << ramferry_attach_last_error(att);
  ramferry_attach_free(att);
  // Freed for real, once the handler returned: its socket file goes.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (std::filesystem::exists(path) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(s.freed.load());
  EXPECT_FALSE(std::filesystem::exists(path));
  ramferry_shared_regions_free(regions);
  munmap(base, 2 * kPage);
  close(fd);
}

// Review D5: an export or an adopter removes its socket file when it goes,
// but not one another process bound at the path since (before: unlinked
// whatever was there, cutting the newcomer off from its clients).
TEST_F(MemoryHandoffTest, APathTakenOverSinceIsLeftToItsNewOwner) {
  const int fd = NewMemfd(1);
  uint8_t* base = MapShared(fd, 0, kPage);
  ASSERT_NE(base, nullptr);
  const SharedRegion r{1, "a", base, kPage, fd, 0};
  auto take_over = [](const std::string& path) {
    std::filesystem::remove(path);
    const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    EXPECT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(s, 1), 0);
    return s;
  };
  {
    auto exp = MemoryExport::Listen(Path("x.sock"), {&r, 1}, nullptr);
    ASSERT_OK(exp);
    const int newcomer = take_over(Path("x.sock"));
    exp->reset();
    EXPECT_TRUE(std::filesystem::exists(Path("x.sock")));
    close(newcomer);
    std::filesystem::remove(Path("x.sock"));  // the newcomer's to remove
  }
  {
    auto adopter = AdoptedMemory::Listen(Path("y.sock"));
    ASSERT_OK(adopter);
    const int newcomer = take_over(Path("y.sock"));
    adopter->reset();
    EXPECT_TRUE(std::filesystem::exists(Path("y.sock")));
    close(newcomer);
    std::filesystem::remove(Path("y.sock"));  // the newcomer's to remove
  }
  // Its own file, still there, goes with it.
  auto exp = MemoryExport::Listen(Path("z.sock"), {&r, 1}, nullptr);
  ASSERT_OK(exp);
  exp->reset();
  EXPECT_FALSE(std::filesystem::exists(Path("z.sock")));
  munmap(base, kPage);
  close(fd);
}

TEST_F(HandOverTest, CApiNullArgumentsAreErrors) {
  auto says_null = [] {
    return std::string(ramferry_last_error()).find("NULL") != std::string::npos;
  };
  ramferry_export* exp = nullptr;
  ramferry_shared_regions* regions = ramferry_shared_regions_new();
  EXPECT_EQ(ramferry_shared_regions_add(nullptr, 1, nullptr, kPage, 0, 0),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_TRUE(says_null());
  EXPECT_EQ(ramferry_export_listen(nullptr, regions, nullptr, nullptr, &exp),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_TRUE(says_null());
  EXPECT_EQ(ramferry_export_listen("x", nullptr, nullptr, nullptr, &exp),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_export_listen("x", regions, nullptr, nullptr, nullptr),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_export_wait_migrated(nullptr, 0),
            RAMFERRY_INVALID_ARGUMENT);
  int64_t ns;
  EXPECT_EQ(ramferry_export_paused_at_ns(nullptr, &ns),
            RAMFERRY_INVALID_ARGUMENT);
  ramferry_attach* att = nullptr;
  EXPECT_EQ(ramferry_attach_open(nullptr, 0, &att), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_TRUE(says_null());
  EXPECT_EQ(ramferry_attach_open("x", 0, nullptr), RAMFERRY_INVALID_ARGUMENT);
  size_t count;
  EXPECT_EQ(ramferry_attach_region_count(nullptr, &count),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_attach_region(nullptr, 0, nullptr, nullptr, nullptr),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_attach_collect(nullptr, nullptr, 0, nullptr),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_attach_pause(nullptr, 0), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_attach_resume(nullptr), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_attach_migrated(nullptr), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_TRUE(says_null());
  EXPECT_EQ(ramferry_hand_over_memory(nullptr, regions, 0),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_hand_over_memory("x", nullptr, 0),
            RAMFERRY_INVALID_ARGUMENT);
  ramferry_adopt* adopt = nullptr;
  EXPECT_EQ(ramferry_adopt_listen(nullptr, &adopt), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_adopt_listen("x", nullptr), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_adopt_wait(nullptr, 0), RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ramferry_adopt_region_count(nullptr, &count),
            RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(
      ramferry_adopt_region(nullptr, 0, nullptr, nullptr, nullptr, nullptr),
      RAMFERRY_INVALID_ARGUMENT);
  EXPECT_TRUE(says_null());
  // Frees and error getters take NULL.
  ramferry_export_free(nullptr);
  ramferry_attach_free(nullptr);
  ramferry_adopt_free(nullptr);
  ramferry_shared_regions_free(nullptr);
  EXPECT_STREQ(ramferry_export_last_error(nullptr), "");
  EXPECT_STREQ(ramferry_attach_last_error(nullptr), "");
  EXPECT_STREQ(ramferry_adopt_last_error(nullptr), "");
  // A bad region through the C API: an error with a message.
  ASSERT_EQ(ramferry_shared_regions_add(regions, 1, nullptr, kPage, -1, 0),
            RAMFERRY_OK);
  const std::string path = Path("c.sock");
  EXPECT_EQ(
      ramferry_export_listen(path.c_str(), regions, nullptr, nullptr, &exp),
      RAMFERRY_INVALID_ARGUMENT);
  EXPECT_EQ(exp, nullptr);
  EXPECT_STRNE(ramferry_last_error(), "");
  ramferry_shared_regions_free(regions);
}

}  // namespace
}  // namespace ramferry
