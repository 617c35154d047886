// Small helpers shared by the ramferry binaries: byte-size flags, a JSON
// writer, process CPU time and a progress line.
#ifndef RAMFERRY_TOOLS_COMMON_CLI_H_
#define RAMFERRY_TOOLS_COMMON_CLI_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ramferry::cli {

// "1GiB", "256MiB", "4KiB", "1G" (= GiB), "1GB" (10^9), "4096".
absl::StatusOr<uint64_t> ParseBytes(absl::string_view text);
// 1073741824 -> "1GiB"; 1536 -> "1.5KiB".
std::string FormatBytes(uint64_t bytes);
// A rate as FormatBytes gives sizes ("956.5MiB/s"): the text reports
// give sizes and rates in the same binary units.
std::string FormatRate(double bytes_per_second);

// A byte count usable as an absl flag type.
struct ByteSize {
  uint64_t bytes = 0;
};
bool AbslParseFlag(absl::string_view text, ByteSize* out, std::string* error);
std::string AbslUnparseFlag(ByteSize size);

// A rate in tc's syntax, in bits per second: "1gbit", "500mbit",
// "100kbit", "12.5mbps" (bytes), "2000000bit".
absl::StatusOr<uint64_t> ParseLinkRate(absl::string_view text);

// A rate in bytes per second: a tc rate (ParseLinkRate) or bytes as
// ParseBytes reads them ("100MB", "1GiB"; "0").
absl::StatusOr<uint64_t> ParseRate(absl::string_view text);

// A byte rate usable as an absl flag type; 0 means unlimited.
struct ByteRate {
  uint64_t bytes_per_s = 0;
};
bool AbslParseFlag(absl::string_view text, ByteRate* out, std::string* error);
std::string AbslUnparseFlag(ByteRate rate);

// What every ramferry binary does first: sets the usage text, makes
// --help list the flags defined in `main_file` (pass __FILE__) with their
// defaults, accepts dashed flag names, and parses the command line.
void InitBinary(int argc, char** argv, absl::string_view usage,
                absl::string_view main_file);

// Whether a flag defined in `flag_file` (CommandLineFlag::Filename) is
// one of the binary's own (defined in `main_file`, as for InitBinary) or
// one every binary shares, rather than Abseil's (--help, --flagfile).
bool IsBinaryFlag(absl::string_view flag_file, absl::string_view main_file);

// Rewrites "--packet-pages=8" as "--packet_pages=8" in place, so flags
// can be spelled with dashes or underscores (Abseil wants underscores).
// Values are left alone; "--" ends the rewriting.
void AcceptDashedFlags(int argc, char** argv);

// Rewrites a bare "--NAME" (or "-NAME"; dashes or underscores) of a flag
// that takes a value as `replacement` ("--NAME=VALUE") in place, so a
// flag such as --postcopy may stand alone where Abseil would want a value
// (and take the next argument for it). `replacement` must outlive the
// parsing. "--" ends the rewriting.
void AcceptBareFlag(int argc, char** argv, absl::string_view name,
                    const char* replacement);

// User + system CPU seconds of this process so far.
double ProcessCpuSeconds();
// CPU seconds of the calling thread so far.
double ThreadCpuSeconds();

// A one-line status on stderr, redrawn in place on a terminal; elsewhere
// printed at most every `min_interval_s` seconds, one line each.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled, double min_interval_s = 1.0);
  ~ProgressLine();
  void Update(absl::string_view text, bool force = false);
  void Done();  // ends the line on a terminal

 private:
  bool enabled_;
  bool tty_;
  double min_interval_s_;
  double last_ = -1e9;
  bool open_ = false;
};

}  // namespace ramferry::cli

#endif  // RAMFERRY_TOOLS_COMMON_CLI_H_
