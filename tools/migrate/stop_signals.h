// SIGTERM, SIGINT and SIGHUP ask ramferry-migrate to stop, and no process
// of a migration may outlive it (docs/migrate.md, "Stopping").
//
// The signals are blocked in every thread (Start(), in main before any
// thread exists, or in each --demo process right after its fork, so every
// thread inherits the mask) and taken
// by one thread of their own (sigwait), which does what the role set:
//  - before a session exists (`unstarted`: nothing to undo, no workload
//    paused), the process ends at once, saying so;
//  - else the first signal runs the role's `stop`: the source cancels
//    its session as a control client's cancel does, so the commit point
//    decides (before it the workload is resumed, after it the migration
//    completes); the destination cancels its session;
//  - where the process has not ended kGrace later, counted from the
//    signal or from the last moment `may_force` said no (a paused
//    workload waits on this process to resume it, or a migration past
//    its commit point to complete), or at a second signal, it ends at
//    once.
// With no role set (before one starts, or after it ended), a signal ends
// the process at once. Ending at once removes the control socket
// (StartControlSocket) and exits 128 + the signal; a --demo's destination,
// forked with cli::ForkWithPipe, dies with it.
//
// Invariant: nothing here runs in a signal handler: the role's functions
// run on the signals' thread (under this module's lock), so they may lock
// and allocate, and must not call back into this module.
#ifndef RAMFERRY_TOOLS_MIGRATE_STOP_SIGNALS_H_
#define RAMFERRY_TOOLS_MIGRATE_STOP_SIGNALS_H_

#include <functional>
#include <string>

#include "absl/time/time.h"

namespace ramferry::migrate::stop_signals {

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and so in
// every thread it starts) and starts the thread that takes them. Call it
// once per process, before any other thread starts: in main, or for a
// --demo in both processes right after the destination's fork (a fork
// after a thread started is one ThreadSanitizer cannot follow).
void Start();

struct Role {
  std::function<void(int sig)> stop;  // begins ending the run
  std::function<bool()> may_force;    // empty: always
  std::function<bool()> unstarted;    // empty: never
};
void SetRole(Role role);
void ClearRole();

// Runs `start`, which makes the control socket at `path` (true if it
// did), so that no signal is acted on between its making and its
// registration here: ending at once removes it (the ControlServer
// removes it on every other end).
void StartControlSocket(const std::string& path,
                        const std::function<bool()>& start);

// For a --demo's destination that ended: where the run has not started
// (Role::unstarted), the process ends now (exit 1) with `why` and "before
// the session was set up: the workload was never paused"; else nothing
// (the session fails by itself, its peer gone).
void EndIfUnstarted(const std::string& why);

// The first stop signal received (0: none), and a signal's name.
int Received();
std::string Name(int sig);

// How long the clean path has before an end at once.
inline constexpr absl::Duration kGrace = absl::Milliseconds(1500);

}  // namespace ramferry::migrate::stop_signals

#endif  // RAMFERRY_TOOLS_MIGRATE_STOP_SIGNALS_H_
