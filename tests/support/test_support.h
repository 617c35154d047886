// Helpers shared by the tests: memory regions with guard pages, a
// receiver running on its own thread, and sizes scaled for sanitizer
// builds.
#ifndef RAMFERRY_TESTS_SUPPORT_TEST_SUPPORT_H_
#define RAMFERRY_TESTS_SUPPORT_TEST_SUPPORT_H_

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ramferry/receiver.h"
#include "ramferry/region.h"
#include "ramferry/sender.h"

namespace ramferry::testing {

// True in ASan/TSan builds, where memory traffic is several times slower.
bool UnderSanitizer();
// `bytes` in a normal build; a quarter (at least 16 MiB) under sanitizers.
uint64_t ScaledBytes(uint64_t bytes);

// Whether reading a never-written private anonymous page maps the shared
// zero page, as PAGEMAP_SCAN reports it (PAGE_IS_PFNZERO). Some kernels
// (seen: a Firecracker guest's 6.18) map a fresh page instead, so pages
// the source only read are not found untouched there: they go as zero
// pages. False also where PAGEMAP_SCAN is missing.
bool ReadFaultsMapTheZeroPage();

// SessionOptions for a test that runs without a key, asking for it
// explicitly (SessionOptions::insecure), as every end without a key must.
SessionOptions InsecureOptions();

// A region on its own guarded mapping: a write outside it crashes.
struct TestRegion {
  std::unique_ptr<MappedMemory> memory;
  Region region;
};
TestRegion MakeRegion(uint32_t id, uint64_t bytes, uint64_t seed = 0,
                      bool fill = false);

// A region that maps a memfd shared, with Region::fd set, so its pages
// move through the file (engine/pages/region_file.h). `lead` bytes of the file
// lie before the mapping (Region::fd_offset).
struct FileRegion {
  std::shared_ptr<void> owner;  // unmaps the memory and closes the file
  Region region;
};
FileRegion MakeFileRegion(uint32_t id, uint64_t bytes, uint64_t seed = 0,
                          bool fill = false, uint64_t lead = 0);

// Runs Receiver::Serve on a thread; result() waits for it.
class ServingReceiver {
 public:
  ServingReceiver(const SessionOptions& options, std::vector<Region> regions);
  ~ServingReceiver();
  uint16_t port() const { return receiver_->port(); }
  Receiver& receiver() { return *receiver_; }
  absl::Status result();
  bool done() const { return done_.load(); }

 private:
  std::vector<Region> regions_;
  std::unique_ptr<Receiver> receiver_;
  // std::future, not absl::Notification: TSan sees its synchronisation.
  std::shared_future<absl::Status> status_;
  std::atomic<bool> done_{false};
};

// A sender and a receiver connected on loopback, one region on each side
// (`src` filled with random bytes, `dst` zeroed).
struct LoopbackPair {
  LoopbackPair(uint64_t bytes, uint64_t seed,
               SessionOptions options = InsecureOptions());
  // Marks every page of `src` dirty and sends one round.
  absl::StatusOr<RoundResult> SendEverything();

  TestRegion src, dst;
  std::unique_ptr<ServingReceiver> rx;
  std::unique_ptr<Sender> sender;
};

// Whether two memory ranges are byte-identical.
bool SameBytes(const Region& a, const Region& b);
// Every byte of `r` is zero.
bool AllZero(const Region& r);

// Threads in this process (from /proc/self/status).
int ThreadCount();
// Whether no thread runs here but the caller's, so that fork() is safe and
// the child may start threads. TSan's own background thread aside: the
// runtime forks safely with it, and it is not a thread of the program.
bool SingleThreaded();

// Loopback TCP for tests that speak to an end directly. Each fails the
// test (EXPECT) when a socket call fails.
// A socket listening on 127.0.0.1 at a free port: {fd, port}.
std::pair<int, uint16_t> ListenOnLoopback(int backlog);
// A socket connected to 127.0.0.1:`port`; -1 if the connect failed (a
// refusal is not a test failure: a flood expects some).
int ConnectToLoopback(uint16_t port);
// A connected loopback TCP pair: {sender fd, receiver fd}.
std::pair<int, int> TcpPair();

}  // namespace ramferry::testing

#endif  // RAMFERRY_TESTS_SUPPORT_TEST_SUPPORT_H_
