#include "tests/support/test_support.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>

#include "base/pagemap_scan.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::testing {

bool ReadFaultsMapTheZeroPage() {
  static const bool maps = [] {
    const long page = sysconf(_SC_PAGESIZE);
    void* m = mmap(nullptr, page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return false;
    madvise(m, page, MADV_NOHUGEPAGE);
    (void)*static_cast<volatile const char*>(m);
    bool zero = false;
    const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      base::PageRegion r{};
      base::PmScanArg a{};
      a.size = sizeof a;
      a.start = reinterpret_cast<uint64_t>(m);
      a.end = a.start + page;
      a.vec = reinterpret_cast<uint64_t>(&r);
      a.vec_len = 1;
      a.return_mask = base::kPageIsPfnZero;
      zero = ioctl(fd, base::kPagemapScan, &a) == 1 &&
             (r.categories & base::kPageIsPfnZero) != 0;
      close(fd);
    }
    munmap(m, page);
    return zero;
  }();
  return maps;
}

SessionOptions InsecureOptions() {
  SessionOptions o;
  o.insecure = true;
  return o;
}

bool UnderSanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#else
  return false;
#endif
}

uint64_t ScaledBytes(uint64_t bytes) {
  if (!UnderSanitizer()) return bytes;
  return std::max<uint64_t>(bytes / 4, 16ull << 20);
}

TestRegion MakeRegion(uint32_t id, uint64_t bytes, uint64_t seed, bool fill) {
  auto mem = MappedMemory::Allocate(bytes, {.guard_pages = true});
  EXPECT_OK(mem);
  TestRegion r;
  r.memory = std::move(*mem);
  r.region =
      Region{id, "region-" + std::to_string(id), r.memory->data(), bytes, 4096};
  if (fill) FillRandom(r.memory->data(), bytes, seed);
  return r;
}

FileRegion MakeFileRegion(uint32_t id, uint64_t bytes, uint64_t seed, bool fill,
                          uint64_t lead) {
  FileRegion r;
  const int fd = memfd_create("ramferry-test-region", MFD_CLOEXEC);
  EXPECT_GE(fd, 0) << "memfd_create: " << strerror(errno);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(lead + bytes)), 0);
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                 static_cast<off_t>(lead));
  EXPECT_NE(m, MAP_FAILED) << "mmap: " << strerror(errno);
  r.owner = std::shared_ptr<void>(m, [fd, bytes](void* p) {
    munmap(p, bytes);
    close(fd);
  });
  r.region = Region{id, "file-region-" + std::to_string(id), m, bytes, 4096};
  r.region.fd = fd;
  r.region.fd_offset = lead;
  if (fill) FillRandom(static_cast<uint8_t*>(m), bytes, seed);
  return r;
}

ServingReceiver::ServingReceiver(const SessionOptions& options,
                                 std::vector<Region> regions)
    : regions_(std::move(regions)) {
  auto rx = Receiver::Listen(options, regions_);
  EXPECT_OK(rx);
  receiver_ = std::move(*rx);
  status_ = std::async(std::launch::async, [this] {
              absl::Status s = receiver_->Serve();
              done_.store(true);
              return s;
            }).share();
}

ServingReceiver::~ServingReceiver() {
  if (!done_.load()) receiver_->Abort(absl::CancelledError("test over"));
  status_.wait();
}

absl::Status ServingReceiver::result() { return status_.get(); }

LoopbackPair::LoopbackPair(uint64_t bytes, uint64_t seed,
                           SessionOptions options)
    : src(MakeRegion(1, bytes, seed, /*fill=*/true)),
      dst(MakeRegion(1, bytes)) {
  rx = std::make_unique<ServingReceiver>(options,
                                         std::vector<Region>{dst.region});
  options.port = rx->port();
  auto s = Sender::Connect(options, {&src.region, 1});
  EXPECT_OK(s);
  if (s.ok()) sender = std::move(*s);
}

absl::StatusOr<RoundResult> LoopbackPair::SendEverything() {
  DirtyBitmap dirty(src.region.page_count());
  dirty.SetAll();
  DirtyBitmap* bitmaps[] = {&dirty};
  return sender->SendRound(bitmaps);
}

namespace {

// Not instrumented by TSan, on purpose. A test reads the destination once
// a round is confirmed; the next round's pages land there later, written
// by the kernel for a peer whose send went through io_uring (or an RDMA
// post). TSan models a socket send and receive as synchronizing, but it
// cannot see an io_uring submit, so it would report that later write as
// racing with this read, though the round protocol orders them (confirmed,
// then the next round scheduled), which is what the tests check.
__attribute__((no_sanitize("thread"))) bool SameMemory(const uint8_t* a,
                                                       const uint8_t* b,
                                                       size_t n) {
  uint8_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

}  // namespace

bool SameBytes(const Region& a, const Region& b) {
  return a.length == b.length &&
         SameMemory(static_cast<const uint8_t*>(a.base),
                    static_cast<const uint8_t*>(b.base), a.length);
}

bool AllZero(const Region& r) {
  const auto* p = static_cast<const uint8_t*>(r.base);
  return std::all_of(p, p + r.length, [](uint8_t b) { return b == 0; });
}

int ThreadCount() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

bool SingleThreaded() {
#if defined(__SANITIZE_THREAD__)
  return ThreadCount() <= 2;
#else
  return ThreadCount() == 1;
#endif
}

std::pair<int, uint16_t> ListenOnLoopback(int backlog) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(listen(fd, backlog), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  return {fd, ntohs(a.sin_port)};
}

int ConnectToLoopback(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::pair<int, int> TcpPair() {
  auto [lfd, port] = ListenOnLoopback(1);
  int cfd = ConnectToLoopback(port);
  EXPECT_GE(cfd, 0);
  int sfd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
  close(lfd);
  return {cfd, sfd};
}

}  // namespace ramferry::testing
