// ramferry-migrate: live migration of changing memory between two
// processes, over ramferry's channels: pre-copy rounds, then stop-and-copy
// or post-copy. The flags are in flags.cc, the roles in *_role.cc and
// demo.cc.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <optional>
#include <string>
#include <system_error>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ramferry/region.h"
#include "tools/common/auth_flags.h"
#include "tools/common/cli.h"
#include "tools/common/endpoints.h"
#include "tools/migrate/flags.h"
#include "tools/migrate/memory_image.h"
#include "tools/migrate/qemu_bridge.h"
#include "tools/migrate/region_memory.h"
#include "tools/migrate/roles.h"
#include "tools/migrate/settings.h"
#include "tools/migrate/stop_signals.h"

namespace ramferry::migrate {
namespace {

// --make-image: a data file, made once, for runs that migrate a file.
int RunMakeImage(const std::string& path) {
  if (absl::GetFlag(FLAGS_size).bytes.size() != 1) {
    return Usage("--make-image writes one file: give --size one size");
  }
  absl::StatusOr<MemoryImage> image =
      MemoryImage::Parse(absl::GetFlag(FLAGS_image));
  if (!image.ok()) return Usage(std::string(image.status().message()));
  // A new file, so untouched pages are holes and not an old run's bytes.
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Usage(absl::StrCat("--make-image: cannot replace ", path, ": ",
                              std::generic_category().message(errno)));
  }
  absl::StatusOr<std::unique_ptr<RegionMemory>> mem =
      RegionMemory::CreateFile(path, absl::GetFlag(FLAGS_size).bytes[0]);
  if (!mem.ok()) return Usage(std::string(mem.status().message()));
  const uint64_t pages = (*mem)->size() / kPageSize;
  std::fprintf(stderr, "ramferry-migrate: writing %s (%s, %s)\n", path.c_str(),
               cli::FormatBytes((*mem)->size()).c_str(),
               image->ToString().c_str());
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const std::vector<uint64_t> counts =
      FillImage((*mem)->data(), PlanImage(pages, *image, seed), seed);
  std::printf(
      "{\"path\":\"%s\",\"bytes\":%llu,\"image\":\"%s\",\"zero_pages\":%llu,"
      "\"untouched_pages\":%llu,\"text_pages\":%llu,\"random_pages\":%llu}\n",
      path.c_str(), static_cast<unsigned long long>((*mem)->size()),
      image->ToString().c_str(), static_cast<unsigned long long>(counts[0]),
      static_cast<unsigned long long>(counts[1]),
      static_cast<unsigned long long>(counts[2]),
      static_cast<unsigned long long>(counts[3]));
  return 0;
}

}  // namespace
}  // namespace ramferry::migrate

int main(int argc, char** argv) {
  // --postcopy alone means on.
  ramferry::cli::AcceptBareFlag(argc, argv, "postcopy", "--postcopy=on");
  ramferry::cli::InitBinary(
      argc, argv,
      "live migration of changing memory over ramferry channels: pre-copy,\n"
      "then stop-and-copy or (--postcopy) post-copy.\n"
      "  ramferry-migrate --demo                       both ends on loopback\n"
      "  ramferry-migrate --role=dest --listen=0.0.0.0:7070 --size=1GiB\n"
      "  ramferry-migrate --role=source --connect=HOST:7070 --size=1GiB\n"
      "  ramferry-migrate --attach=SOCKET --hand-over=SOCKET   on this host,\n"
      "                                                  nothing copied\n"
      "  ramferry-migrate --role=source --qemu=PATH --connect=HOST:7070\n"
      "  ramferry-migrate --role=dest --qemu=PATH     carry a QEMU migration",
      ramferry::migrate::kFlagsFile);
  using namespace ramferry::migrate;
  // Before any thread: every thread inherits the signals' mask. A --demo
  // starts it once its destination is forked (ForkDestination): a fork
  // after a thread started is one TSan cannot follow, and the child has
  // none of the parent's threads anyway. Parsing the flags starts none.
  if (!absl::GetFlag(FLAGS_demo)) stop_signals::Start();
  if (const std::string path = absl::GetFlag(FLAGS_make_image); !path.empty()) {
    return RunMakeImage(path);
  }
  // Before the roles: a hand-over has none of their own (settings.cc).
  if (!absl::GetFlag(FLAGS_hand_over).empty()) {
    if (absl::Status s = CheckHandOverFlags(); !s.ok()) {
      return Usage(std::string(s.message()));
    }
    return RunHandOver();
  }
  using ramferry::migrate::Role;
  const std::optional<Role> role = absl::GetFlag(FLAGS_role);
  if (!absl::GetFlag(FLAGS_demo) && !role.has_value()) {
    return Usage("choose --role=source, --role=dest or --demo");
  }
  if (!absl::GetFlag(FLAGS_demo) && !absl::GetFlag(FLAGS_demo_link).empty()) {
    return Usage("--demo-link goes with --demo");
  }
  if (absl::Status s = ramferry::migrate::CheckHandoffFlags(role); !s.ok()) {
    return Usage(std::string(s.message()));
  }
  if (absl::GetFlag(FLAGS_size).bytes.size() > 1 && role != Role::kDest) {
    return Usage(
        "a list of sizes is for --role=dest (one region each); a source "
        "migrates its one region or the regions its attached workload "
        "exports");
  }
  // Before Session(): its checks name options, these name the flags.
  if (absl::Status s =
          CheckPostcopy(role == Role::kDest || absl::GetFlag(FLAGS_demo));
      !s.ok()) {
    return Usage(std::string(s.message()));
  }
  const std::string qemu = absl::GetFlag(FLAGS_qemu);
  if (!qemu.empty()) {
    if (absl::Status s = CheckQemuFlags(); !s.ok()) {
      return Usage(std::string(s.message()));
    }
  }
  absl::StatusOr<ramferry::SessionOptions> opt = Session();
  if (!opt.ok()) return Usage(std::string(opt.status().message()));
  opt->streams = !qemu.empty();
  if (absl::GetFlag(FLAGS_demo)) return RunDemo(*opt);
  ramferry::cli::WarnIfUnauthenticated(*opt, "ramferry-migrate");
  if (role == Role::kSource) {
    absl::StatusOr<std::vector<ramferry::Endpoint>> to =
        ramferry::cli::ParseEndpointList(absl::GetFlag(FLAGS_connect));
    if (!to.ok()) {
      return Usage("--connect: " + std::string(to.status().message()));
    }
    if (to->size() > opt->channels) {
      return Usage(absl::StrFormat(
          "--connect names %d addresses for --channels=%d: give each "
          "address a channel at least",
          to->size(), opt->channels));
    }
    ramferry::cli::ApplyEndpoints(*to, &*opt);
    if (absl::Status s = ramferry::ValidateOptions(*opt); !s.ok()) {
      return Usage("--connect: " + std::string(s.message()));
    }
    if (!qemu.empty()) return RunQemuSource(*opt, qemu);
    return RunSourceRole(*opt);
  }
  absl::StatusOr<ramferry::Endpoint> at =  // Role::kDest
      ramferry::cli::ParseHostPort(absl::GetFlag(FLAGS_listen));
  if (!at.ok()) {
    return Usage("--listen: " + std::string(at.status().message()));
  }
  opt->host = at->host;
  opt->port = at->port;
  if (!qemu.empty()) return RunQemuDest(*opt, qemu);
  return RunDestRole(*opt);
}
