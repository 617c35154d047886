#include "tools/migrate/attached_workload.h"

#include <signal.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ramferry::migrate {
namespace {

class AttachedTracker final : public DirtyTracker {
 public:
  AttachedTracker(AttachedMemory& memory, std::string name)
      : memory_(memory), name_(std::move(name)) {}
  absl::string_view name() const override { return name_; }
  absl::StatusOr<uint64_t> Collect(DirtyBitmap& dirty) override {
    DirtyBitmap* one[] = {&dirty};
    return memory_.CollectWritten(one);
  }
  absl::StatusOr<uint64_t> CollectAll(
      absl::Span<DirtyBitmap* const> dirty) override {
    return memory_.CollectWritten(dirty);
  }

 private:
  AttachedMemory& memory_;
  const std::string name_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AttachedWorkload>> AttachedWorkload::Attach(
    const std::string& socket_path, absl::Duration connect_timeout,
    absl::Duration pause_timeout) {
  absl::StatusOr<std::unique_ptr<AttachedMemory>> memory =
      AttachedMemory::Attach(socket_path, connect_timeout);
  if (!memory.ok()) {
    return absl::Status(memory.status().code(),
                        absl::StrCat("--attach=", socket_path, ": ",
                                     memory.status().message()));
  }
  return std::unique_ptr<AttachedWorkload>(
      new AttachedWorkload(*std::move(memory), socket_path, pause_timeout));
}

std::vector<Region> AttachedWorkload::regions(
    const std::function<std::string(size_t)>& name) const {
  std::vector<Region> out;
  for (const Region& r : memory_->regions()) {
    out.push_back(r);
    out.back().id = static_cast<uint32_t>(out.size());
    out.back().name = name(out.size() - 1);
  }
  return out;
}

std::unique_ptr<DirtyTracker> AttachedWorkload::MakeTracker() {
  return std::make_unique<AttachedTracker>(
      *memory_, absl::StrCat("uffd-wp of pid ", memory_->pid()));
}

std::string AttachedWorkload::Describe() const {
  return absl::StrFormat("pid %d at %s", memory_->pid(), path_);
}

std::string AttachedWorkload::pause_method() const {
  if (!ever_paused_) return "";
  if (memory_->stopped_by_signal()) return "SIGSTOP";
  return memory_->pauses_itself() ? "handler" : "SIGSTOP";
}

bool AttachedWorkload::running() const {
  return !paused_ && !stopped_ && memory_->alive();
}

absl::Status AttachedWorkload::Pause() {
  paused_ = true;
  ever_paused_ = true;
  return memory_->Pause(pause_timeout_);
}

void AttachedWorkload::Resume() {
  paused_ = false;
  if (absl::Status s = memory_->Resume(); !s.ok()) {
    std::fprintf(stderr,
                 "ramferry-migrate: WARNING: could not resume the attached "
                 "workload (%s): %s\n",
                 Describe().c_str(), std::string(s.message()).c_str());
  }
}

void AttachedWorkload::Stop() {
  stopped_ = true;
  if (absl::Status s = memory_->Migrated(); !s.ok()) {
    std::fprintf(stderr,
                 "ramferry-migrate: WARNING: could not tell the attached "
                 "workload (%s) it was migrated: %s; it stays paused\n",
                 Describe().c_str(), std::string(s.message()).c_str());
  }
}

}  // namespace ramferry::migrate
