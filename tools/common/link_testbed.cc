#include "tools/common/link_testbed.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace ramferry::cli {
namespace {

constexpr char kNetnsDir[] = "/run/netns";
constexpr uint64_t kMinBurstBytes = 128 << 10;

// The namespaces this process's live testbeds hold: a leftover of an
// earlier process that had our pid is any other name with our pid.
std::mutex live_mu;
std::set<std::string>& LiveNamespaces() {
  static auto* live = new std::set<std::string>;
  return *live;
}

std::string ErrnoText(int err) { return std::generic_category().message(err); }

// iproute2's `name`, where Debian and others put it.
absl::StatusOr<std::string> FindTool(const char* name) {
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    std::string path = absl::StrCat(dir, name);
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "a link testbed needs iproute2's `%s`, found in none of /usr/sbin, "
      "/sbin, /usr/bin, /bin (apt-get install iproute2)",
      name));
}

// Runs argv (argv[0] a path) to its end; an error carries what it printed.
// posix_spawn, not fork: the caller may run threads.
absl::Status Run(const std::vector<std::string>& argv) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", ErrnoText(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out[1], 2);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));
  }
  args.push_back(nullptr);
  pid_t pid = -1;
  const int spawned =
      posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  std::string output;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    output.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  const std::string command = absl::StrJoin(argv, " ");
  if (spawned != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run `", command, "`: ", ErrnoText(spawned)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "`%s` failed (%s): %s", command,
      WIFEXITED(status) ? absl::StrCat("exit ", WEXITSTATUS(status))
                        : absl::StrCat("signal ", WTERMSIG(status)),
      absl::StripAsciiWhitespace(output)));
}

absl::Status EnterNamespace(const std::string& name) {
  const std::string path = absl::StrCat(kNetnsDir, "/", name);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("open ", path, ": ", ErrnoText(errno)));
  }
  const int rc = setns(fd, CLONE_NEWNET);
  const int err = errno;
  close(fd);
  if (rc != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "setns into network namespace ", name, ": ", ErrnoText(err)));
  }
  return absl::OkStatus();
}

// Deletes namespaces of a testbed whose process is gone (killed before
// its destructor ran), or of an earlier process that had our pid.
void DeleteLeftovers(const std::string& ip) {
  std::error_code err;
  std::filesystem::directory_iterator dir(kNetnsDir, err);
  if (err) return;  // no namespace made yet
  std::vector<std::string> stale;
  {
    std::lock_guard<std::mutex> lock(live_mu);
    for (const std::filesystem::directory_entry& e : dir) {
      const std::string name = e.path().filename().string();
      const std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
      pid_t pid = 0;
      if (parts.size() != 4 || parts[0] != "rf" ||
          (parts[3] != "src" && parts[3] != "dst") ||
          !absl::SimpleAtoi(parts[1], &pid) || pid <= 0) {
        continue;
      }
      const bool gone = kill(pid, 0) != 0 && errno == ESRCH;
      const bool ours_but_not_live =
          pid == getpid() && LiveNamespaces().count(name) == 0;
      if (gone || ours_but_not_live) stale.push_back(name);
    }
  }
  for (const std::string& name : stale) {
    (void)Run({ip, "netns", "del", name});
  }
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseLinkRateList(
    absl::string_view text) {
  std::vector<std::string> rates;
  int item = 0;
  for (absl::string_view r : absl::StrSplit(text, ',')) {
    ++item;
    absl::StatusOr<uint64_t> bits = ParseLinkRate(r);
    if (!bits.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "item %d of '%s': %s", item, text, bits.status().message()));
    }
    rates.emplace_back(absl::StripAsciiWhitespace(r));
  }
  return rates;
}

LinkTestbed::LinkTestbed(std::vector<std::string> rates)
    : rates_(std::move(rates)) {
  static std::atomic<int> next{0};
  const std::string base = absl::StrFormat("rf-%d-%d", getpid(), next++);
  src_ = base + "-src";
  dst_ = base + "-dst";
}

absl::StatusOr<std::unique_ptr<LinkTestbed>> LinkTestbed::Create(
    absl::Span<const std::string> rates) {
  if (rates.empty() || rates.size() > kMaxLinks) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a link testbed takes 1 to %d links, not %d", kMaxLinks, rates.size()));
  }
  for (const std::string& r : rates) {
    if (absl::StatusOr<uint64_t> bits = ParseLinkRate(r); !bits.ok()) {
      return bits.status();
    }
  }
  if (geteuid() != 0) {
    return absl::PermissionDeniedError(
        "a link testbed needs root to create network namespaces "
        "(CAP_SYS_ADMIN, CAP_NET_ADMIN): run as root");
  }
  std::unique_ptr<LinkTestbed> bed(
      new LinkTestbed({rates.begin(), rates.end()}));
  RAMFERRY_RETURN_IF_ERROR(bed->Build());  // bed cleans up
  return bed;
}

absl::Status LinkTestbed::Build() {
  RAMFERRY_ASSIGN_OR_RETURN(std::string ip, FindTool("ip"));
  RAMFERRY_ASSIGN_OR_RETURN(std::string tc, FindTool("tc"));
  DeleteLeftovers(ip);
  {
    std::lock_guard<std::mutex> lock(live_mu);
    LiveNamespaces().insert(src_);
    LiveNamespaces().insert(dst_);
  }
  auto made = [](absl::Status s, bool* flag) {
    *flag = s.ok();
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("cannot create a network "
                                                 "namespace: ",
                                                 s.message()));
    }
    return s;
  };
  if (absl::Status s = made(Run({ip, "netns", "add", src_}), &made_src_);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = made(Run({ip, "netns", "add", dst_}), &made_dst_);
      !s.ok()) {
    return s;
  }
  std::vector<std::vector<std::string>> steps = {
      {ip, "-n", src_, "link", "set", "dev", "lo", "up"},
      {ip, "-n", dst_, "link", "set", "dev", "lo", "up"},
  };
  for (size_t i = 0; i < links(); ++i) {
    const std::string dev = device(i);
    const uint64_t bits = *ParseLinkRate(rates_[i]);
    const std::string rate = absl::StrCat(bits, "bit");
    const std::string burst =
        absl::StrCat(std::max<uint64_t>(bits / 8 / 250, kMinBurstBytes));
    steps.push_back({ip, "-n", src_, "link", "add", dev, "type", "veth", "peer",
                     "name", dev, "netns", dst_});
    steps.push_back(
        {ip, "-n", src_, "addr", "add", source_address(i) + "/24", "dev", dev});
    steps.push_back({ip, "-n", dst_, "addr", "add",
                     destination_address(i) + "/24", "dev", dev});
    for (const std::string* ns : {&src_, &dst_}) {
      steps.push_back({ip, "-n", *ns, "link", "set", "dev", dev, "up"});
      steps.push_back({tc, "-n", *ns, "qdisc", "replace", "dev", dev, "root",
                       "tbf", "rate", rate, "burst", burst, "latency", "50ms"});
    }
  }
  for (const std::vector<std::string>& step : steps) {
    if (absl::Status s = Run(step); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("link testbed: ", s.message()));
    }
  }
  return absl::OkStatus();
}

LinkTestbed::~LinkTestbed() {
  absl::StatusOr<std::string> ip = FindTool("ip");
  const std::pair<const std::string*, bool> namespaces[] = {{&dst_, made_dst_},
                                                            {&src_, made_src_}};
  for (const auto& [name, made] : namespaces) {
    if (!made || !ip.ok()) continue;
    if (absl::Status s = Run({*ip, "netns", "del", *name}); !s.ok()) {
      std::fprintf(stderr, "link testbed: %s\n",
                   std::string(s.message()).c_str());
    }
  }
  std::lock_guard<std::mutex> lock(live_mu);
  LiveNamespaces().erase(src_);
  LiveNamespaces().erase(dst_);
}

std::string LinkTestbed::device(size_t link) const {
  return absl::StrCat("veth", link);
}
std::string LinkTestbed::source_address(size_t link) const {
  return absl::StrCat("10.77.", link, ".1");
}
std::string LinkTestbed::destination_address(size_t link) const {
  return absl::StrCat("10.77.", link, ".2");
}

std::string LinkTestbed::Describe(size_t link) const {
  return absl::StrFormat(
      "link %d: %s, source %s dev %s %s -> destination %s dev %s %s", link,
      rates_[link], src_, device(link), source_address(link), dst_,
      device(link), destination_address(link));
}

absl::Status LinkTestbed::EnterSource() const { return EnterNamespace(src_); }
absl::Status LinkTestbed::EnterDestination() const {
  return EnterNamespace(dst_);
}

absl::Status LinkTestbed::SetLinkUp(size_t link, bool up) const {
  if (link >= links()) {
    return absl::OutOfRangeError(
        absl::StrFormat("link %d: the testbed has %d", link, links()));
  }
  RAMFERRY_ASSIGN_OR_RETURN(std::string ip, FindTool("ip"));
  return Run(
      {ip, "-n", src_, "link", "set", "dev", device(link), up ? "up" : "down"});
}

SavedNetworkNamespace::SavedNetworkNamespace()
    : fd_(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) {}

SavedNetworkNamespace::~SavedNetworkNamespace() {
  if (fd_ < 0) return;
  if (setns(fd_, CLONE_NEWNET) != 0) {
    std::fprintf(stderr,
                 "link testbed: cannot return to the saved network "
                 "namespace: %s\n",
                 ErrnoText(errno).c_str());
  }
  close(fd_);
}

}  // namespace ramferry::cli
