// /proc/<pid>/maps and smaps: one parser and one reader for every room that
// asks the kernel what a range of addresses maps (untouched pages, a
// region's file, post-copy's memory check, an attached workload's ranges).
//
// A line that is in neither file's format is an error, never skipped: a
// misparsed line must not be mistaken for anonymous memory, nor a mapping
// be missed.
#ifndef RAMFERRY_BASE_PROC_MAPS_H_
#define RAMFERRY_BASE_PROC_MAPS_H_

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/errno_status.h"
#include "base/owned_fd.h"

namespace ramferry::base {

// One mapping of /proc/<pid>/maps.
struct MapsEntry {
  uint64_t start = 0;  // [start, end): virtual addresses
  uint64_t end = 0;
  bool writable = false;  // perms "w"
  bool shared = false;    // perms "s" (MAP_SHARED) rather than "p"
  uint64_t offset = 0;    // file offset mapped at `start`
  uint32_t dev_major = 0;
  uint32_t dev_minor = 0;
  uint64_t inode = 0;
  // As the kernel prints it: may be empty, hold spaces, end in
  // " (deleted)", or be a pseudo-name such as "[heap]". Newline removed.
  std::string path;
  // From smaps only: the mapping's "VmFlags:" line after the colon, each
  // flag followed by a space (" uw " finds a flag); empty from maps.
  std::string vm_flags;
  bool operator==(const MapsEntry&) const = default;
};

namespace proc_maps_internal {

// The next field up to `sep` (or the end), removed from `s` with the
// separator; nothing if the field is empty.
inline std::optional<std::string_view> TakeField(std::string_view& s,
                                                 char sep) {
  const size_t at = s.find(sep);
  const std::string_view field = s.substr(0, at);
  if (field.empty()) return std::nullopt;
  s.remove_prefix(at == std::string_view::npos ? s.size() : at + 1);
  return field;
}

template <typename T>
bool ParseNumber(std::optional<std::string_view> s, int base, T& out) {
  if (!s || s->empty()) return false;
  auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), out, base);
  return ec == std::errc() && end == s->data() + s->size();
}

// "Name:" at the start of a line: an smaps attribute of the mapping
// above it. A maps line starts with a hex address and '-', never a colon.
inline bool IsAttributeLine(std::string_view line) {
  const size_t colon = line.find(':');
  if (colon == 0 || colon == std::string_view::npos) return false;
  for (char c : line.substr(0, colon)) {
    const bool letter = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
    if (!letter && c != '_' && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

}  // namespace proc_maps_internal

// Nothing for a line that is not in the kernel's maps format.
inline std::optional<MapsEntry> ParseMapsLine(std::string_view line) {
  using proc_maps_internal::ParseNumber;
  using proc_maps_internal::TakeField;
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  MapsEntry e;
  const std::optional<std::string_view> start = TakeField(line, '-');
  const std::optional<std::string_view> end = TakeField(line, ' ');
  const std::optional<std::string_view> perms = TakeField(line, ' ');
  const std::optional<std::string_view> offset = TakeField(line, ' ');
  const std::optional<std::string_view> dev_major = TakeField(line, ':');
  const std::optional<std::string_view> dev_minor = TakeField(line, ' ');
  const std::optional<std::string_view> inode = TakeField(line, ' ');
  if (!ParseNumber(start, 16, e.start) || !ParseNumber(end, 16, e.end) ||
      e.end <= e.start || !perms || !ParseNumber(offset, 16, e.offset) ||
      !ParseNumber(dev_major, 16, e.dev_major) ||
      !ParseNumber(dev_minor, 16, e.dev_minor) ||
      !ParseNumber(inode, 10, e.inode)) {
    return std::nullopt;
  }
  const std::string_view p = *perms;
  if (p.size() != 4 || (p[0] != 'r' && p[0] != '-') ||
      (p[1] != 'w' && p[1] != '-') || (p[2] != 'x' && p[2] != '-') ||
      (p[3] != 's' && p[3] != 'p')) {
    return std::nullopt;
  }
  e.writable = p[1] == 'w';
  e.shared = p[3] == 's';
  // The kernel pads to a column before the name; names start with '/' or
  // '[', so leading blanks are padding and trailing ones are the name's.
  line.remove_prefix(std::min(line.find_first_not_of(' '), line.size()));
  e.path = std::string(line);
  return e;
}

enum class VmaKind {
  kPrivateAnonymous,  // absent pages read zero: ask the page tables
  kSharedFile,        // the file's holes read zero: ask the file
  kOther,             // nothing is known to read zero
};
// By the maps line alone; a kSharedFile is still checked to be a regular
// file (and the same inode) before it is opened.
inline VmaKind ClassifyVma(const MapsEntry& e) {
  if (e.shared) return e.inode != 0 ? VmaKind::kSharedFile : VmaKind::kOther;
  if (e.inode != 0 || e.dev_major != 0 || e.dev_minor != 0) {
    return VmaKind::kOther;
  }
  // Only the names anonymous memory has; [vdso], [vvar], [uprobes] and the
  // like are special mappings whose absent pages are not zero.
  const std::string_view p = e.path;
  if (p.empty() || p == "[heap]" || p == "[stack]" ||
      p.starts_with("[stack:") || p.starts_with("[anon:")) {
    return VmaKind::kPrivateAnonymous;
  }
  return VmaKind::kOther;
}

// Which file a text is: /proc/<pid>/maps (a line per mapping) or smaps
// (each mapping's line followed by "Name: value" attribute lines).
enum class MapsFile { kMaps, kSmaps };

// Calls `fn` with each mapping that `text` (a `file`'s contents) lists,
// in address order, until `fn` returns false; a maps line as soon as it
// is read, an smaps mapping once its attributes are (its VmFlags in
// MapsEntry::vm_flags). A line not in `file`'s format is INTERNAL, naming
// it and `what` (the file's name).
inline absl::Status ForEachMapping(
    std::string_view text, MapsFile file, std::string_view what,
    absl::FunctionRef<bool(const MapsEntry&)> fn) {
  std::optional<MapsEntry> pending;  // smaps: its attributes may follow
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    if (line.empty()) continue;
    if (std::optional<MapsEntry> e = ParseMapsLine(line)) {
      if (file == MapsFile::kMaps) {
        if (!fn(*e)) return absl::OkStatus();
        continue;
      }
      if (pending && !fn(*pending)) return absl::OkStatus();
      pending = std::move(e);
    } else if (file == MapsFile::kSmaps && pending &&
               proc_maps_internal::IsAttributeLine(line)) {
      if (line.starts_with("VmFlags:")) {
        pending->vm_flags = std::string(line.substr(8)) + " ";
      }
    } else {
      return absl::InternalError(absl::StrCat(
          "unexpected line in ", absl::string_view(what.data(), what.size()),
          ": \"", absl::string_view(line.data(), line.size()), "\""));
    }
  }
  if (pending) fn(*pending);
  return absl::OkStatus();
}

// A /proc file's contents, read whole (its size is not known up front).
inline absl::StatusOr<std::string> ReadProcFile(const std::string& path) {
  const OwnedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
  std::string text;
  char buf[64 << 10];
  for (;;) {
    const ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("read ", path));
    }
    if (n == 0) return text;
    text.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace ramferry::base

#endif  // RAMFERRY_BASE_PROC_MAPS_H_
