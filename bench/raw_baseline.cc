#include "bench/raw_baseline.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdio>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/destination_process.h"
#include "channels/socket_dial.h"
#include "ramferry/region.h"
#include "tools/common/cli.h"

namespace ramferry::bench {
namespace {

// The slice of [0, bytes) that connection i of n carries, page-aligned.
std::pair<uint64_t, uint64_t> Slice(uint64_t bytes, int i, int n) {
  const uint64_t pages = bytes / kPageSize;
  const uint64_t first = pages * i / n, last = pages * (i + 1) / n;
  return {first * kPageSize, (last - first) * kPageSize};
}

[[noreturn]] void Receive(const TransferConfig& c, int out) {
  auto fail = [&](const std::string& why) {
    ReportLine(out, "error " + why);
    _exit(1);
  };
  auto mem = MappedMemory::Allocate(c.bytes, {.huge_pages = c.huge_pages});
  if (!mem.ok()) fail(std::string(mem.status().message()));
  if (c.prefault_destination &&
      !PrefaultForWrite((*mem)->data(), c.bytes).ok()) {
    fail("prefault failed");
  }
  int lfd =
      socket(c.session.host.find(':') == std::string::npos ? AF_INET : AF_INET6,
             SOCK_STREAM, 0);
  sockaddr_storage a{};
  socklen_t len;
  if (c.session.host.find(':') == std::string::npos) {
    auto* in = reinterpret_cast<sockaddr_in*>(&a);
    in->sin_family = AF_INET;
    inet_pton(AF_INET, c.session.host.c_str(), &in->sin_addr);
    len = sizeof(sockaddr_in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a);
    in6->sin6_family = AF_INET6;
    inet_pton(AF_INET6, c.session.host.c_str(), &in6->sin6_addr);
    len = sizeof(sockaddr_in6);
  }
  if (bind(lfd, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
      listen(lfd, 64) != 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    fail("listen failed");
  }
  const uint16_t port = ntohs(
      a.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&a)->sin_port
                             : reinterpret_cast<sockaddr_in6*>(&a)->sin6_port);
  ReportLine(out, absl::StrFormat("port %d", port));
  const int n = static_cast<int>(c.session.channels);
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    int fd = accept(lfd, nullptr, nullptr);
    uint32_t index = 0;
    if (fd < 0 || read(fd, &index, sizeof index) != sizeof index ||
        index >= static_cast<uint32_t>(n)) {
      fail("bad connection");
    }
    fds.resize(n, -1);
    fds[index] = fd;
  }
  const double cpu0 = cli::ProcessCpuSeconds();
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      auto [off, bytes] = Slice(c.bytes, i, n);
      uint8_t* p = (*mem)->data() + off;
      const uint64_t read_size =
          c.raw_whole_receive ? bytes
                              : uint64_t{c.session.packet_pages} * kPageSize;
      while (bytes > 0) {
        ssize_t r = recv(fds[i], p, std::min(bytes, read_size), MSG_WAITALL);
        if (r <= 0) return;
        p += r;
        bytes -= static_cast<uint64_t>(r);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double cpu = cli::ProcessCpuSeconds() - cpu0;
  // Received: the clock stops here; the digest comes after, untimed.
  ReportLine(out, absl::StrFormat("received %.6f", cpu));
  ReportLine(
      out, absl::StrFormat("digest %d", XXH3_64bits((*mem)->data(), c.bytes)));
  _exit(0);
}

}  // namespace

absl::StatusOr<TransferResult> RunRawBaseline(const TransferConfig& c) {
  absl::StatusOr<std::unique_ptr<DestinationProcess>> dest =
      DestinationProcess::Fork([&](int out) { Receive(c, out); });
  if (!dest.ok()) return dest.status();
  absl::StatusOr<std::string> line = (*dest)->ReadLine(absl::Seconds(120));
  uint32_t port = 0;
  if (!line.ok() || !absl::StartsWith(*line, "port ") ||
      !absl::SimpleAtoi(line->substr(5), &port)) {
    return absl::InternalError(
        absl::StrCat("raw receiver did not start: ",
                     line.ok() ? *line : std::string(line.status().message())));
  }
  auto mem = MappedMemory::Allocate(c.bytes, {.huge_pages = c.huge_pages});
  if (!mem.ok()) return mem.status();
  FillRandom((*mem)->data(), c.bytes, c.seed);
  const int n = static_cast<int>(c.session.channels);
  const size_t send_size = size_t{c.session.packet_pages} * kPageSize;
  std::vector<int> socks;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<int> fd = channels::ConnectWithRetry(
        c.session.host, static_cast<uint16_t>(port), absl::Seconds(10));
    uint32_t index = i;
    if (!fd.ok() || write(*fd, &index, sizeof index) != sizeof index) {
      for (int s : socks) close(s);
      return absl::InternalError("raw connect failed");
    }
    socks.push_back(*fd);
  }
  TransferResult r;
  const double cpu0 = cli::ProcessCpuSeconds();
  const absl::Time t0 = absl::Now();
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      auto [off, bytes] = Slice(c.bytes, i, n);
      const uint8_t* p = (*mem)->data() + off;
      while (bytes > 0) {
        ssize_t w = send(socks[i], p, std::min<uint64_t>(bytes, send_size),
                         MSG_NOSIGNAL);
        if (w <= 0) return;
        p += w;
        bytes -= static_cast<uint64_t>(w);
      }
    });
  }
  for (auto& t : threads) t.join();
  r.sender_cpu_s = cli::ProcessCpuSeconds() - cpu0;
  // The receiver's two lines, then the clock stops at the first.
  line = (*dest)->ReadLine(absl::Seconds(120));
  r.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  absl::StatusOr<std::string> digest_line =
      line.ok() ? (*dest)->ReadLine(absl::Seconds(120)) : line;
  for (int fd : socks) close(fd);
  uint64_t digest = 0;
  if (!digest_line.ok() || !absl::StartsWith(*line, "received ") ||
      !absl::SimpleAtod(line->substr(9), &r.receiver_cpu_s) ||
      !absl::StartsWith(*digest_line, "digest ") ||
      !absl::SimpleAtoi(digest_line->substr(7), &digest)) {
    return absl::InternalError(absl::StrCat(
        "raw receiver failed: ",
        digest_line.ok() ? *line + " / " + *digest_line
                         : std::string(digest_line.status().message())));
  }
  (*dest)->Reap();
  r.destination_digest = digest;
  r.bytes = c.bytes;
  r.rounds = 1;
  r.source_digest = XXH3_64bits((*mem)->data(), c.bytes);
  r.verified = r.source_digest == r.destination_digest;
  return r;
}

}  // namespace ramferry::bench
