// A writer the migration cannot see: another process's workload memory
// (its memfd, found under /proc/PID/fd) written through a descriptor of
// this process, not through the workload's mapping, so that no
// write-protect fault or dirty bit tracks it. What such a writer leaves
// is caught only by verification, which is what the tests using it show.
#ifndef RAMFERRY_TESTS_SUPPORT_ROGUE_WRITER_H_
#define RAMFERRY_TESTS_SUPPORT_ROGUE_WRITER_H_

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ramferry::testing {

class RogueWriter {
 public:
  // Writes 8-byte counters at pseudo-random places of the first `span`
  // bytes of the memfd named `memfd_name` that process `pid` holds, a
  // pause of `pause` every 64 writes, until destroyed. valid() is false
  // (and a test failure recorded) where no such memfd is open there.
  RogueWriter(pid_t pid, absl::string_view memfd_name, uint64_t span,
              absl::Duration pause) {
    std::string memfd;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(
             absl::StrCat("/proc/", pid, "/fd"), ec)) {
      const std::string target =
          std::filesystem::read_symlink(e.path(), ec).string();
      if (absl::StrContains(target, absl::StrCat("memfd:", memfd_name))) {
        memfd = e.path().string();
      }
    }
    EXPECT_FALSE(memfd.empty()) << "no memfd " << memfd_name << " in " << pid;
    fd_ = memfd.empty() ? -1 : open(memfd.c_str(), O_RDWR | O_CLOEXEC);
    EXPECT_GE(fd_, 0) << memfd;
    if (fd_ < 0) return;
    writer_ = std::thread([this, span, pause] {
      uint64_t x = 1;
      for (uint64_t i = 1; !stop_.load(); ++i) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const auto at = static_cast<off_t>((x >> 20) % span) & ~off_t{7};
        if (pwrite(fd_, &i, sizeof i, at) != sizeof i) {
          ADD_FAILURE() << "pwrite at " << at;
          return;
        }
        if (i % 64 == 0) absl::SleepFor(pause);
      }
    });
  }
  RogueWriter(const RogueWriter&) = delete;
  RogueWriter& operator=(const RogueWriter&) = delete;
  ~RogueWriter() { Stop(); }

  bool valid() const { return fd_ >= 0; }

  void Stop() {
    stop_ = true;
    if (writer_.joinable()) writer_.join();
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread writer_;
};

}  // namespace ramferry::testing

#endif  // RAMFERRY_TESTS_SUPPORT_ROGUE_WRITER_H_
