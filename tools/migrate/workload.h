// What a migration pauses, resumes and throttles: the built-in memload
// (tools/migrate/memload.h), or another process that exported its memory
// (AttachedWorkload, tools/migrate/attached_workload.h).
#ifndef RAMFERRY_TOOLS_MIGRATE_WORKLOAD_H_
#define RAMFERRY_TOOLS_MIGRATE_WORKLOAD_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"

namespace ramferry::migrate {

class Workload {
 public:
  virtual ~Workload() = default;
  // Returns once nothing writes the region, until Resume() or Stop(). An
  // error: the workload may still write.
  virtual absl::Status Pause() = 0;
  // After a failed migration: the workload writes here again.
  virtual void Resume() = 0;
  // Migrated: the workload never writes here again.
  virtual void Stop() = 0;
  // Slows the writers to (100 - percent)% of their rate (auto-converge);
  // a workload that cannot be throttled ignores it and says so here.
  virtual bool can_throttle() const = 0;
  virtual void SetThrottle(int percent) = 0;
  // Pages written so far, where the workload counts them.
  virtual std::optional<uint64_t> pages_written() const = 0;
  virtual bool running() const = 0;
};

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_WORKLOAD_H_
