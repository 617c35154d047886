// --attach: the workload is another process that exported its memory
// (ramferry/memory_handoff.h). Its writes come from its own pagemap, its
// pauses from its handler (or SIGSTOP), and it cannot be throttled.
#ifndef RAMFERRY_TOOLS_MIGRATE_ATTACHED_WORKLOAD_H_
#define RAMFERRY_TOOLS_MIGRATE_ATTACHED_WORKLOAD_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ramferry/memory_handoff.h"
#include "ramferry/region.h"
#include "tools/migrate/dirty_tracker.h"
#include "tools/migrate/workload.h"

namespace ramferry::migrate {

class AttachedWorkload final : public Workload {
 public:
  // Attaches to the export at `socket_path`.
  static absl::StatusOr<std::unique_ptr<AttachedWorkload>> Attach(
      const std::string& socket_path, absl::Duration connect_timeout,
      absl::Duration pause_timeout);

  // The exported regions as this process maps them, in the export's
  // order, numbered for the session as the destination numbers its own
  // (ids 1, 2, ...; `name(i)` names region i).
  std::vector<Region> regions(
      const std::function<std::string(size_t)>& name) const;
  // Reports the workload's writes.
  std::unique_ptr<DirtyTracker> MakeTracker();
  // "pid N at SOCKET".
  std::string Describe() const;
  // How the last pause was made: "handler" or "SIGSTOP" (why: pause_note);
  // empty if it never was.
  std::string pause_method() const;
  const std::string& pause_note() const { return memory_->pause_note(); }

  absl::Status Pause() override;
  void Resume() override;
  void Stop() override;
  bool can_throttle() const override { return false; }
  void SetThrottle(int) override {}
  std::optional<uint64_t> pages_written() const override {
    return std::nullopt;
  }
  // Not paused here, and the process still exists.
  bool running() const override;

 private:
  AttachedWorkload(std::unique_ptr<AttachedMemory> memory, std::string path,
                   absl::Duration pause_timeout)
      : memory_(std::move(memory)),
        path_(std::move(path)),
        pause_timeout_(pause_timeout) {}

  std::unique_ptr<AttachedMemory> memory_;
  const std::string path_;
  const absl::Duration pause_timeout_;
  bool paused_ = false;
  bool ever_paused_ = false;
  bool stopped_ = false;
};

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_ATTACHED_WORKLOAD_H_
