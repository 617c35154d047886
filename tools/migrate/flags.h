// ramferry-migrate's flags: their definitions live in flags.cc, where
// --help finds them (kFlagsFile); the settings drawn from them, in
// settings.cc.
#ifndef RAMFERRY_TOOLS_MIGRATE_FLAGS_H_
#define RAMFERRY_TOOLS_MIGRATE_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tools/common/cli.h"

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

// The session's region i: "ram", "ram2", ... on both ends.
std::string RegionName(size_t i);

}  // namespace ramferry::migrate

ABSL_DECLARE_FLAG(std::string, role);
ABSL_DECLARE_FLAG(std::string, connect);
ABSL_DECLARE_FLAG(std::string, listen);
ABSL_DECLARE_FLAG(bool, demo);
ABSL_DECLARE_FLAG(std::string, demo_host);
ABSL_DECLARE_FLAG(std::string, demo_link);
ABSL_DECLARE_FLAG(std::string, transport);
ABSL_DECLARE_FLAG(ramferry::migrate::RegionSizes, size);
ABSL_DECLARE_FLAG(std::string, region_file);
ABSL_DECLARE_FLAG(std::string, dest_region_file);
ABSL_DECLARE_FLAG(std::string, dirty_tracking);
ABSL_DECLARE_FLAG(ramferry::cli::ByteSize, dirty_set);
ABSL_DECLARE_FLAG(ramferry::migrate::DirtyRate, dirty_rate);
ABSL_DECLARE_FLAG(int, writers);
ABSL_DECLARE_FLAG(std::string, dirty_write);
ABSL_DECLARE_FLAG(absl::Duration, downtime_limit);
ABSL_DECLARE_FLAG(uint32_t, max_rounds);
ABSL_DECLARE_FLAG(uint32_t, stall_rounds);
ABSL_DECLARE_FLAG(bool, auto_converge);
ABSL_DECLARE_FLAG(std::string, control);
ABSL_DECLARE_FLAG(absl::Duration, timeout);
ABSL_DECLARE_FLAG(std::string, on_timeout);
ABSL_DECLARE_FLAG(std::string, postcopy);
ABSL_DECLARE_FLAG(std::string, postcopy_urgent);
ABSL_DECLARE_FLAG(absl::Duration, postcopy_resume_timeout);
ABSL_DECLARE_FLAG(ramferry::cli::ByteRate, max_bandwidth);
ABSL_DECLARE_FLAG(std::string, prefault);
ABSL_DECLARE_FLAG(std::string, verify);
ABSL_DECLARE_FLAG(absl::Duration, connect_timeout);
ABSL_DECLARE_FLAG(absl::Duration, stall_timeout);
ABSL_DECLARE_FLAG(bool, survive_channel_loss);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::string, image);
ABSL_DECLARE_FLAG(std::string, make_image);
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(bool, allow_foreign_writers);
ABSL_DECLARE_FLAG(std::string, attach);
ABSL_DECLARE_FLAG(absl::Duration, attach_pause_timeout);
ABSL_DECLARE_FLAG(std::string, export);
ABSL_DECLARE_FLAG(absl::Duration, export_timeout);
ABSL_DECLARE_FLAG(std::string, hand_over);
ABSL_DECLARE_FLAG(absl::Duration, hand_over_timeout);
ABSL_DECLARE_FLAG(bool, allow_unauthenticated);

#endif  // RAMFERRY_TOOLS_MIGRATE_FLAGS_H_
