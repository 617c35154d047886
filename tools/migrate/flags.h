// ramferry-migrate's flags: their definitions live in flags.cc, where
// --help finds them (kFlagsFile); the settings drawn from them, in
// settings.cc.
#ifndef RAMFERRY_TOOLS_MIGRATE_FLAGS_H_
#define RAMFERRY_TOOLS_MIGRATE_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/named_enum.h"
#include "tools/common/channel_flags.h"
#include "tools/common/cli.h"
#include "tools/common/enum_flag.h"
#include "tools/migrate/destination.h"
#include "tools/migrate/postcopy_mode.h"

namespace ramferry::migrate {

// The file that defines the binary's flags, for cli::InitBinary.
extern const char kFlagsFile[];

// A dirty rate: "256MiB" (bytes per second), "50000pages" (per second) or
// "auto": 256 MiB/s into anonymous memory, nothing into a --region-file,
// which may be another program's memory.
struct DirtyRate {
  double pages_per_s = -1;  // -1: auto
};
bool AbslParseFlag(absl::string_view text, DirtyRate* out, std::string* err);
std::string AbslUnparseFlag(DirtyRate r);

// --size: one region's size, or a comma list of sizes, one region each
// (a destination for an attached workload that exports several).
struct RegionSizes {
  std::vector<uint64_t> bytes;
};
bool AbslParseFlag(absl::string_view text, RegionSizes* out, std::string* err);
std::string AbslUnparseFlag(const RegionSizes& sizes);

// The flags that name one of a fixed set of values, typed: an unknown
// name is refused as the command line is parsed (tools/common/enum_flag.h).

// --role; none (std::nullopt) for --demo and --hand-over.
enum class Role { kSource, kDest };
inline constexpr base::EnumName<Role> kRoleNames[] = {
    {Role::kSource, "source"},
    {Role::kDest, "dest"},
};
RAMFERRY_ENUM_FLAG(Role, kRoleNames, "--role");

// --dirty-tracking: how the source finds the pages memload rewrote.
enum class DirtyTracking { kUffd, kBitmap };
inline constexpr base::EnumName<DirtyTracking> kDirtyTrackingNames[] = {
    {DirtyTracking::kUffd, "uffd"},
    {DirtyTracking::kBitmap, "bitmap"},
};
RAMFERRY_ENUM_FLAG(DirtyTracking, kDirtyTrackingNames, "--dirty-tracking");

// --dirty-write: what one of memload's writes changes.
enum class DirtyWrite { kWord, kPage };
inline constexpr base::EnumName<DirtyWrite> kDirtyWriteNames[] = {
    {DirtyWrite::kWord, "word"},
    {DirtyWrite::kPage, "page"},
};
RAMFERRY_ENUM_FLAG(DirtyWrite, kDirtyWriteNames, "--dirty-write");

// --verify: the tool's choices, not the library's VerifyMode (which has
// no "off", and a "reread" the tool does not offer): Session() maps them.
enum class VerifyFlag { kFull, kSent, kOff };
inline constexpr base::EnumName<VerifyFlag> kVerifyFlagNames[] = {
    {VerifyFlag::kFull, "full"},
    {VerifyFlag::kSent, "sent"},
    {VerifyFlag::kOff, "off"},
};
RAMFERRY_ENUM_FLAG(VerifyFlag, kVerifyFlagNames, "--verify");

// --postcopy-urgent.
enum class OnOff { kOn, kOff };
inline constexpr base::EnumName<OnOff> kOnOffNames[] = {
    {OnOff::kOn, "on"},
    {OnOff::kOff, "off"},
};
RAMFERRY_ENUM_FLAG(OnOff, kOnOffNames, "--postcopy-urgent");

// --postcopy and --on-timeout, by postcopy_mode.cc's tables. --on-timeout
// is optional: none follows --postcopy (ParseTimeoutAction).
RAMFERRY_ENUM_FLAG_VIA(PostcopyMode, ParsePostcopyMode, PostcopyModeName);
inline absl::StatusOr<TimeoutAction> ParseOnTimeoutFlag(absl::string_view t) {
  return ParseTimeoutAction(t, PostcopyMode::kOff);
}
RAMFERRY_ENUM_FLAG_VIA(TimeoutAction, ParseOnTimeoutFlag, TimeoutActionName);

// --prefault: a Prefault, or "auto" (std::nullopt: by the memory's kind
// and --postcopy, DestinationPrefault).
struct PrefaultFlag {
  std::optional<Prefault> mode;
};
// Inline, as the tests that parse it do not link flags.cc.
inline bool AbslParseFlag(absl::string_view text, PrefaultFlag* out,
                          std::string* error) {
  if (text == "auto") {
    out->mode = std::nullopt;
    return true;
  }
  absl::StatusOr<Prefault> mode = ParsePrefault(text);
  if (!mode.ok()) {
    // ParsePrefault's refusal ends with the modes; auto is one more.
    *error = absl::StrCat(mode.status().message(), ", auto");
    return false;
  }
  out->mode = *mode;
  return true;
}
inline std::string AbslUnparseFlag(const PrefaultFlag& flag) {
  return flag.mode ? PrefaultName(*flag.mode) : "auto";
}

// The session's region i: "ram", "ram2", ... on both ends.
std::string RegionName(size_t i);

}  // namespace ramferry::migrate

ABSL_DECLARE_FLAG(std::optional<ramferry::migrate::Role>, role);
ABSL_DECLARE_FLAG(std::string, connect);
ABSL_DECLARE_FLAG(std::string, listen);
ABSL_DECLARE_FLAG(bool, demo);
ABSL_DECLARE_FLAG(std::string, demo_host);
ABSL_DECLARE_FLAG(std::string, demo_link);
ABSL_DECLARE_FLAG(ramferry::cli::TransportFlag, transport);
ABSL_DECLARE_FLAG(ramferry::migrate::RegionSizes, size);
ABSL_DECLARE_FLAG(std::string, region_file);
ABSL_DECLARE_FLAG(std::string, dest_region_file);
ABSL_DECLARE_FLAG(ramferry::migrate::DirtyTracking, dirty_tracking);
ABSL_DECLARE_FLAG(ramferry::cli::ByteSize, dirty_set);
ABSL_DECLARE_FLAG(ramferry::migrate::DirtyRate, dirty_rate);
ABSL_DECLARE_FLAG(int, writers);
ABSL_DECLARE_FLAG(ramferry::migrate::DirtyWrite, dirty_write);
ABSL_DECLARE_FLAG(absl::Duration, downtime_limit);
ABSL_DECLARE_FLAG(uint32_t, max_rounds);
ABSL_DECLARE_FLAG(uint32_t, stall_rounds);
ABSL_DECLARE_FLAG(bool, auto_converge);
ABSL_DECLARE_FLAG(std::string, control);
ABSL_DECLARE_FLAG(absl::Duration, timeout);
ABSL_DECLARE_FLAG(std::optional<ramferry::migrate::TimeoutAction>, on_timeout);
ABSL_DECLARE_FLAG(ramferry::migrate::PostcopyMode, postcopy);
ABSL_DECLARE_FLAG(ramferry::migrate::OnOff, postcopy_urgent);
ABSL_DECLARE_FLAG(absl::Duration, postcopy_resume_timeout);
ABSL_DECLARE_FLAG(ramferry::cli::ByteRate, max_bandwidth);
ABSL_DECLARE_FLAG(ramferry::migrate::PrefaultFlag, prefault);
ABSL_DECLARE_FLAG(ramferry::migrate::VerifyFlag, verify);
ABSL_DECLARE_FLAG(absl::Duration, connect_timeout);
ABSL_DECLARE_FLAG(absl::Duration, stall_timeout);
ABSL_DECLARE_FLAG(bool, survive_channel_loss);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::string, image);
ABSL_DECLARE_FLAG(std::string, make_image);
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(bool, allow_foreign_writers);
ABSL_DECLARE_FLAG(std::string, qemu);
ABSL_DECLARE_FLAG(std::string, attach);
ABSL_DECLARE_FLAG(absl::Duration, attach_pause_timeout);
ABSL_DECLARE_FLAG(std::string, export);
ABSL_DECLARE_FLAG(absl::Duration, export_timeout);
ABSL_DECLARE_FLAG(std::string, hand_over);
ABSL_DECLARE_FLAG(absl::Duration, hand_over_timeout);
ABSL_DECLARE_FLAG(bool, allow_unauthenticated);

#endif  // RAMFERRY_TOOLS_MIGRATE_FLAGS_H_
