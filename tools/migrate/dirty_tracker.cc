#include "tools/migrate/dirty_tracker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "ramferry/write_tracker.h"

namespace ramferry::migrate {
namespace {

// The engine's errors name the kernel feature; the tool's name the way out.
absl::Status WithFallback(const absl::Status& s) {
  return absl::Status(
      s.code(), absl::StrCat(s.message(), "; use --dirty-tracking=bitmap"));
}

class UffdWpTracker final : public DirtyTracker {
 public:
  explicit UffdWpTracker(std::unique_ptr<WriteTracker> writes)
      : writes_(std::move(writes)) {}
  absl::string_view name() const override { return "uffd-wp"; }
  absl::StatusOr<uint64_t> Collect(DirtyBitmap& dirty) override {
    absl::StatusOr<uint64_t> n = writes_->Collect(dirty);
    if (!n.ok()) return WithFallback(n.status());
    return n;
  }

 private:
  std::unique_ptr<WriteTracker> writes_;
};

class BitmapTracker final : public DirtyTracker {
 public:
  explicit BitmapTracker(uint64_t pages) : written_(pages) {}
  absl::string_view name() const override { return "bitmap"; }
  void MarkWritten(uint64_t page) override { written_.Set(page); }
  absl::StatusOr<uint64_t> Collect(DirtyBitmap& dirty) override {
    uint64_t reported = 0;
    for (size_t w = 0; w < written_.words(); ++w) {
      uint64_t bits = written_.TakeWord(w);
      reported += __builtin_popcountll(bits);
      dirty.OrWord(w, bits);
    }
    return reported;
  }

 private:
  DirtyBitmap written_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DirtyTracker>> MakeUffdWpTracker(
    void* base, uint64_t length) {
  absl::StatusOr<std::unique_ptr<WriteTracker>> writes =
      WriteTracker::Track(base, length);
  if (!writes.ok()) return WithFallback(writes.status());
  return std::make_unique<UffdWpTracker>(*std::move(writes));
}

std::unique_ptr<DirtyTracker> MakeBitmapTracker(uint64_t pages) {
  return std::make_unique<BitmapTracker>(pages);
}

}  // namespace ramferry::migrate
