#include "tools/migrate/stop_signals.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ramferry::migrate::stop_signals {
namespace {

// One per process; a forked child starts its own (Start), the parent's
// left as the fork found it (its mutex may have been held by a thread the
// child does not have).
struct State {
  std::mutex mu;
  Role role;                 // guarded by mu
  std::string control_path;  // guarded by mu
};

std::atomic<State*> state{nullptr};
std::atomic<int> received{0};

constexpr char kUnstarted[] =
    " before the session was set up: the workload was never paused";

sigset_t StopSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

// Ends the process now, `st.mu` held: what a clean end would have
// removed is removed here, the rest dies with the process.
[[noreturn]] void EndNow(State& st, const std::string& line, int code) {
  if (!st.control_path.empty()) unlink(st.control_path.c_str());
  std::fprintf(stderr, "ramferry-migrate: %s\n", line.c_str());
  std::fflush(stderr);
  _exit(code);
}

void Watch(State* st) {
  const sigset_t set = StopSet();
  int first = 0;
  absl::Time force_at = absl::InfiniteFuture();
  while (true) {
    int sig = 0;
    if (first == 0) {
      if (sigwait(&set, &sig) != 0) continue;
    } else {
      // After the first signal: a look every 50 ms whether the clean
      // path is over its time and an end at once loses nothing.
      const timespec poll{0, 50'000'000};
      sig = sigtimedwait(&set, nullptr, &poll);
      if (sig < 0) {
        std::lock_guard<std::mutex> lock(st->mu);
        if (st->role.may_force && !st->role.may_force()) {
          // Paused: the clean path resumes the workload, or completes
          // the migration past the commit point; its end gets the whole
          // grace from the pause's end.
          force_at = absl::Now() + kGrace;
          continue;
        }
        if (absl::Now() < force_at) continue;
        EndNow(*st,
               absl::StrCat(Name(first),
                            " received and the run did not end within ",
                            absl::FormatDuration(kGrace), ": ending now"),
               128 + first);
      }
    }
    std::lock_guard<std::mutex> lock(st->mu);
    if (first != 0) {
      EndNow(*st, absl::StrCat(Name(sig), " received again: ending now"),
             128 + sig);
    }
    first = sig;
    received.store(sig);
    if (!st->role.stop) {
      EndNow(*st, absl::StrCat(Name(sig), " received: ending now"), 128 + sig);
    }
    if (st->role.unstarted && st->role.unstarted()) {
      EndNow(*st, absl::StrCat("interrupted by ", Name(sig), kUnstarted),
             128 + sig);
    }
    std::fprintf(stderr, "ramferry-migrate: %s received: stopping\n",
                 Name(sig).c_str());
    st->role.stop(sig);
    force_at = absl::Now() + kGrace;
  }
}

}  // namespace

void Start() {
  const sigset_t set = StopSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto* st = new State;  // never freed: its thread may outlive main
  state.store(st);
  received.store(0);
  std::thread(Watch, st).detach();
}

void SetRole(Role role) {
  State* st = state.load();
  if (st == nullptr) return;
  std::lock_guard<std::mutex> lock(st->mu);
  st->role = std::move(role);
}

void ClearRole() { SetRole({}); }

void StartControlSocket(const std::string& path,
                        const std::function<bool()>& start) {
  State* st = state.load();
  if (st == nullptr) {
    start();
    return;
  }
  std::lock_guard<std::mutex> lock(st->mu);
  if (start()) st->control_path = path;
}

void EndIfUnstarted(const std::string& why) {
  State* st = state.load();
  if (st == nullptr) return;
  std::lock_guard<std::mutex> lock(st->mu);
  if (st->role.unstarted && st->role.unstarted()) {
    EndNow(*st, why + kUnstarted, 1);
  }
}

int Received() { return received.load(); }

std::string Name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev)
                           : absl::StrCat("signal ", sig);
}

}  // namespace ramferry::migrate::stop_signals
