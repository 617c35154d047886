// Fuzzes the memory hand-off's receiving ends against a hostile peer
// process, over a real unix socket with real SCM_RIGHTS: the attacher
// (AttachedMemory::Attach, then its Collect, Pause, Resume and Migrated
// calls) facing a workload's export, and the adopter (AdoptedMemory::Wait)
// facing a hand-over.
//
// The peer is a child process forked once, which for each input connects
// or accepts, sends the offer with the descriptors the input names
// (memfds of every size, its own pagemap, pipes, /dev/null, an eventfd,
// sockets, a directory, a userfaultfd, /proc files; none, too many, more
// than one packet may carry), or a packet too large, then answers the
// attacher's commands as the input says (right, wrong, never, or by
// hanging up). With `real ranges` the offer's regions are rewritten to lie
// on the child's own write-tracked memfd, so an input can get past the
// checks to a live attachment.
//
// Input: flags (bit 0 adopt, else attach; bit 1 real ranges; bit 2 an
// oversized packet; bit 3 hang up after the offer), then three
// length-prefixed byte lists (descriptor kinds, the child's answers, the
// attacher's calls), then the offer's bytes.
//
// Properties: no crash, no hang (each input ends within seconds); every
// descriptor received is either owned by the attachment or closed (the
// process's descriptor count is the same after each input); an attachment
// that was accepted has only regions that can be read whole (no SIGBUS).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/page_size.h"
#include "proto/memory_handoff.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/memory_handoff.h"
#include "ramferry/write_tracker.h"
#include "tests/fuzz/fuzz_support.h"

namespace ramferry::fuzz {
namespace {

constexpr uint64_t kPage = base::kSmallPageSize;
constexpr uint64_t kTrackedPages = 16;
constexpr int kMaxFds = 253;  // SCM_MAX_FD: more is one sendmsg's EINVAL

struct Plan {
  bool adopt = false, real_ranges = false, oversize = false, hang_up = false;
  std::vector<uint8_t> fd_kinds, answers, calls, offer;
};

Plan ParsePlan(const uint8_t* data, size_t size) {
  Plan p;
  size_t at = 0;
  auto byte = [&]() -> uint8_t { return at < size ? data[at++] : 0; };
  auto list = [&](std::vector<uint8_t>& out) {
    const size_t n = std::min<size_t>(byte(), size - std::min(at, size));
    out.assign(data + at, data + at + n);
    at += n;
  };
  const uint8_t flags = byte();
  p.adopt = flags & 1;
  p.real_ranges = flags & 2;
  p.oversize = flags & 4;
  p.hang_up = flags & 8;
  list(p.fd_kinds);
  list(p.answers);
  list(p.calls);
  if (at < size) p.offer.assign(data + at, data + size);
  return p;
}

std::string Dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/ramferry-handoff-fuzz.XXXXXX";
    const char* d = mkdtemp(tmpl);
    FUZZ_CHECK(d != nullptr);
    return std::string(d);
  }();
  return dir;
}
std::string ExportPath() { return Dir() + "/export.sock"; }
std::string AdoptPath() { return Dir() + "/adopt.sock"; }

int MakeMemfd(uint64_t bytes, unsigned flags = 0) {
  const int fd =
      static_cast<int>(syscall(SYS_memfd_create, "fuzz", MFD_CLOEXEC | flags));
  if (fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// ---- the hostile peer (the child) ----

struct Peer {
  int listen_fd = -1;
  int tracked_fd = -1;
  uint8_t* tracked = nullptr;
};

// A descriptor of kind `kind`, new for this offer (closed by the caller).
int MakeFd(const Peer& peer, uint8_t kind, int conn) {
  switch (kind % 12) {
    case 0:
      return dup(peer.tracked_fd);
    case 1:
      return MakeMemfd(kTrackedPages * kPage);
    case 2:
      return MakeMemfd(0);
    case 3:
      return open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    case 4: {
      int p[2];
      if (pipe2(p, O_CLOEXEC) != 0) return -1;
      close(p[1]);
      return p[0];
    }
    case 5:
      return open("/dev/null", O_RDWR | O_CLOEXEC);
    case 6:
      return eventfd(0, EFD_CLOEXEC);
    case 7:
      return dup(conn);
    case 8:
      return open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    case 9: {
      const int fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC));
      return fd >= 0 ? fd : open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    case 10:
      return open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    default: {
      const int fd = MakeMemfd(kPage, MFD_ALLOW_SEALING);
      if (fd >= 0) fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK);
      return fd;
    }
  }
}

// The offer as sent: the input's bytes, with real ranges rewritten onto
// the child's tracked memfd where they decode.
std::vector<uint8_t> OfferBytes(const Peer& peer, const Plan& plan) {
  std::vector<uint8_t> bytes = plan.offer;
  if (plan.real_ranges) {
    if (absl::StatusOr<proto::Offer> o = proto::DecodeOffer(bytes); o.ok()) {
      const size_t n = std::min<size_t>(o->regions.size(), kTrackedPages);
      o->regions.resize(n);
      o->pid = static_cast<uint32_t>(getpid());
      const uint64_t slice = kTrackedPages / n * kPage;
      for (size_t i = 0; i < n; ++i) {
        o->regions[i].base =
            reinterpret_cast<uint64_t>(peer.tracked) + i * slice;
        o->regions[i].length = slice;
        o->regions[i].fd_offset = i * slice;
      }
      if (absl::StatusOr<std::vector<uint8_t>> e = proto::EncodeOffer(*o);
          e.ok()) {
        bytes = *std::move(e);
      }
    }
  }
  if (plan.oversize) bytes.resize(proto::kMaxOfferBytes + 1 + bytes.size());
  return bytes;
}

void SendOffer(int conn, const std::vector<uint8_t>& bytes,
               const std::vector<int>& fds) {
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  (void)sendmsg(conn, &msg, MSG_NOSIGNAL);
}

// Answers the commands that come, one answer byte each: silence, the
// right reply, another command, or hanging up; then reads until closed.
void Answer(int conn, const Plan& plan) {
  size_t next = 0;
  for (;;) {
    pollfd p{conn, POLLIN, 0};
    if (poll(&p, 1, 3000) != 1) return;
    uint8_t in[64];
    const ssize_t n = recv(conn, in, sizeof in, 0);
    if (n <= 0) return;
    if (next >= plan.answers.size()) continue;
    const uint8_t a = plan.answers[next++];
    absl::StatusOr<proto::CommandMessage> c =
        proto::DecodeCommand({in, static_cast<size_t>(n)});
    proto::CommandMessage reply{proto::HandoffCommand::kPaused, a};
    switch (a % 4) {
      case 0:
        continue;
      case 1:
        if (!c.ok()) continue;
        reply.type = c->type == proto::HandoffCommand::kPause
                         ? proto::HandoffCommand::kPaused
                         : proto::HandoffCommand::kResumed;
        break;
      case 2:
        reply.type = static_cast<proto::HandoffCommand>(1 + (a >> 2) % 8);
        break;
      default:
        return;
    }
    const std::vector<uint8_t> out = proto::EncodeCommand(reply);
    (void)send(conn, out.data(), out.size(), MSG_NOSIGNAL);
  }
}

void ServeOne(const Peer& peer, const Plan& plan) {
  int conn = -1;
  if (plan.adopt) {
    conn = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, AdoptPath().c_str(), sizeof a.sun_path - 1);
    if (connect(conn, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(conn);
      return;
    }
  } else {
    pollfd p{peer.listen_fd, POLLIN, 0};
    if (poll(&p, 1, 3000) != 1) return;
    conn = accept4(peer.listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) return;
  }
  std::vector<int> fds;
  for (size_t i = 0; i < plan.fd_kinds.size() && fds.size() < kMaxFds; ++i) {
    const int fd = MakeFd(peer, plan.fd_kinds[i], conn);
    if (fd >= 0) fds.push_back(fd);
  }
  SendOffer(conn, OfferBytes(peer, plan), fds);
  for (int fd : fds) close(fd);
  if (!plan.hang_up) Answer(conn, plan);
  close(conn);
}

[[noreturn]] void RunPeer(int plans) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  Peer peer;
  peer.tracked_fd = MakeMemfd(kTrackedPages * kPage);
  void* m = peer.tracked_fd < 0
                ? MAP_FAILED
                : mmap(nullptr, kTrackedPages * kPage, PROT_READ | PROT_WRITE,
                       MAP_SHARED, peer.tracked_fd, 0);
  if (m != MAP_FAILED) {
    peer.tracked = static_cast<uint8_t*>(m);
    std::memset(peer.tracked, 0x5a, kTrackedPages * kPage);
  }
  // Tracked where the kernel can (async write-protect); otherwise every
  // real range is refused as untracked, which is a path too.
  absl::StatusOr<std::unique_ptr<WriteTracker>> tracker =
      peer.tracked == nullptr
          ? absl::StatusOr<std::unique_ptr<WriteTracker>>(nullptr)
          : WriteTracker::Track(peer.tracked, kTrackedPages * kPage);
  peer.listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, ExportPath().c_str(), sizeof a.sun_path - 1);
  unlink(a.sun_path);
  if (bind(peer.listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(peer.listen_fd, 8) != 0) {
    _exit(3);
  }
  (void)!write(plans, "L", 1);
  for (;;) {
    std::vector<uint8_t> buf(1 << 17);
    // Each plan comes after a 'P': a packet of 0 bytes is the parent gone.
    const ssize_t n = recv(plans, buf.data(), buf.size(), 0);
    if (n <= 0) _exit(0);
    ServeOne(peer, ParsePlan(buf.data() + 1, static_cast<size_t>(n) - 1));
    (void)!write(plans, "D", 1);
  }
}

// ---- the receiving side (this process) ----

struct Child {
  pid_t pid = -1;
  int plans = -1;
};

const Child& TheChild() {
  static const Child child = [] {
    Child c;
    int sv[2];
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    Dir();
    c.pid = fork();
    FUZZ_CHECK(c.pid >= 0);
    if (c.pid == 0) {
      close(sv[0]);
      RunPeer(sv[1]);
    }
    close(sv[1]);
    c.plans = sv[0];
    char ready = 0;
    FUZZ_CHECK(read(c.plans, &ready, 1) == 1 && ready == 'L');
    return c;
  }();
  return child;
}

size_t OpenFds() {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

// Every byte of an accepted region is readable (a file shorter than its
// region would fault here, as a migration reading it would).
uint64_t ReadAll(const void* base, uint64_t length) {
  const auto* p = static_cast<const volatile uint8_t*>(base);
  uint64_t sum = 0;
  for (uint64_t i = 0; i < length; i += 512) sum += p[i];
  return sum;
}

void Attach(const Plan& plan) {
  absl::StatusOr<std::unique_ptr<AttachedMemory>> att =
      AttachedMemory::Attach(ExportPath(), absl::Milliseconds(200));
  if (!att.ok()) return;
  FUZZ_CHECK(!(*att)->regions().empty());
  std::vector<DirtyBitmap> bitmaps;
  std::vector<DirtyBitmap*> ptrs;
  bitmaps.reserve((*att)->regions().size());
  for (const Region& r : (*att)->regions()) {
    FUZZ_CHECK(r.length > 0 && r.length % kPage == 0);
    ReadAll(r.base, r.length);
    bitmaps.emplace_back(r.page_count());
  }
  for (DirtyBitmap& b : bitmaps) ptrs.push_back(&b);
  for (uint8_t call : plan.calls) {
    switch (call % 4) {
      case 0:
        (void)(*att)->CollectWritten(ptrs);
        break;
      case 1:
        (void)(*att)->Pause(absl::Milliseconds(20));
        break;
      case 2:
        (void)(*att)->Resume();
        break;
      default:
        (void)(*att)->Migrated();
        break;
    }
  }
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ramferry::fuzz;
  if (size >= (1 << 17)) return 0;
  const Child& child = TheChild();
  const Plan plan = ParsePlan(data, size);
  const size_t fds_before = OpenFds();
  std::unique_ptr<ramferry::AdoptedMemory> adopt;
  if (plan.adopt) {
    // Listening before the child connects.
    absl::StatusOr<std::unique_ptr<ramferry::AdoptedMemory>> l =
        ramferry::AdoptedMemory::Listen(AdoptPath());
    FUZZ_CHECK(l.ok());
    adopt = *std::move(l);
  }
  std::vector<uint8_t> packet{'P'};
  packet.insert(packet.end(), data, data + size);
  FUZZ_CHECK(send(child.plans, packet.data(), packet.size(), MSG_NOSIGNAL) ==
             static_cast<ssize_t>(packet.size()));
  if (plan.adopt) {
    if (adopt->Wait(absl::Milliseconds(50)).ok()) {
      for (const ramferry::SharedRegion& r : adopt->regions()) {
        FUZZ_CHECK(r.length > 0);
        ReadAll(r.base, r.length);
      }
    }
    adopt.reset();
  } else {
    Attach(plan);
  }
  // A workload left stopped by a Pause runs again for the next input.
  kill(child.pid, SIGCONT);
  pollfd p{child.plans, POLLIN, 0};
  FUZZ_CHECK(poll(&p, 1, 10000) == 1);  // the peer finished in time
  char done = 0;
  FUZZ_CHECK(read(child.plans, &done, 1) == 1 && done == 'D');
  FUZZ_CHECK(OpenFds() == fds_before);  // nothing received was leaked
  return 0;
}
