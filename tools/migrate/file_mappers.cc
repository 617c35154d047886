#include "tools/migrate/file_mappers.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/proc_maps.h"

namespace ramferry::migrate {

bool MapsLineMapsFile(std::string_view line, uint32_t major, uint32_t minor,
                      uint64_t inode, bool* writable) {
  const std::optional<base::MapsEntry> e = base::ParseMapsLine(line);
  if (!e || e->inode == 0 || e->inode != inode || e->dev_major != major ||
      e->dev_minor != minor) {
    return false;
  }
  *writable = e->writable;
  return true;
}

absl::StatusOr<std::vector<FileMapper>> OtherProcessesMapping(
    const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrFormat("%s: %s", path, strerrordesc_np(errno)));
  }
  std::vector<FileMapper> found;
  const pid_t self = getpid();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    char* end = nullptr;
    const long pid = std::strtol(name.c_str(), &end, 10);
    if (*end != '\0' || pid <= 0 || pid == self) continue;
    std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
    if (!maps) continue;  // gone, or not ours to read
    FileMapper m{static_cast<pid_t>(pid), "", false};
    bool maps_it = false;
    for (std::string line; std::getline(maps, line);) {
      bool writable = false;
      if (MapsLineMapsFile(line, major(st.st_dev), minor(st.st_dev), st.st_ino,
                           &writable)) {
        maps_it = true;
        m.writable = m.writable || writable;
      }
    }
    if (!maps_it) continue;
    std::ifstream comm(absl::StrCat("/proc/", pid, "/comm"));
    std::getline(comm, m.command);
    found.push_back(std::move(m));
  }
  return found;
}

std::string DescribeMappers(const std::vector<FileMapper>& mappers) {
  return absl::StrJoin(
      mappers, ", ", [](std::string* out, const FileMapper& m) {
        absl::StrAppend(out, m.pid, " (", m.command.empty() ? "?" : m.command,
                        m.writable ? ", writable" : "", ")");
      });
}

}  // namespace ramferry::migrate
