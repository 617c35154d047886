// Which other processes map a file: ramferry-migrate's --region-file
// tracks writes with userfaultfd write-protection, which is per address
// space, so another process's writes to the same file never show up as
// dirty. A migration of a file that another process writes is only
// correct if that process stops writing; the tool says so up front.
#ifndef RAMFERRY_TOOLS_MIGRATE_FILE_MAPPERS_H_
#define RAMFERRY_TOOLS_MIGRATE_FILE_MAPPERS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ramferry::migrate {

struct FileMapper {
  pid_t pid = 0;
  std::string command;    // /proc/<pid>/comm
  bool writable = false;  // some mapping of the file allows writes
};

// Whether one line of /proc/<pid>/maps maps the file with device
// `major:minor` and inode `inode`; `*writable` is set when it does and its
// permissions allow writing.
bool MapsLineMapsFile(std::string_view line, uint32_t major, uint32_t minor,
                      uint64_t inode, bool* writable);

// Every process other than this one that maps `path`, from /proc/*/maps
// (processes this one may not read are skipped). Errors only when `path`
// itself cannot be looked at.
absl::StatusOr<std::vector<FileMapper>> OtherProcessesMapping(
    const std::string& path);

// "1234 (writer, writable), 99 (cat)".
std::string DescribeMappers(const std::vector<FileMapper>& mappers);

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_FILE_MAPPERS_H_
