#include "tools/common/cli.h"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "base/clock.h"

namespace ramferry::cli {

absl::StatusOr<uint64_t> ParseBytes(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < t.size() &&
         (absl::ascii_isdigit(t[digits]) || t[digits] == '.')) {
    ++digits;
  }
  double value;
  if (digits == 0 || !absl::SimpleAtod(t.substr(0, digits), &value)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' is not a size (like 4096, 256MiB, 1GiB)", text));
  }
  std::string unit = absl::AsciiStrToLower(t.substr(digits));
  struct Unit {
    const char* name;
    double factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", 1 << 10},
      {"kib", 1 << 10},
      {"kb", 1e3},
      {"m", 1 << 20},
      {"mib", 1 << 20},
      {"mb", 1e6},
      {"g", 1 << 30},
      {"gib", 1 << 30},
      {"gb", 1e9},
      {"t", 1ull << 40},
      {"tib", 1ull << 40},
      {"tb", 1e12},
  };
  for (const Unit& u : kUnits) {
    if (unit == u.name) {
      double bytes = value * u.factor;
      if (bytes < 0 || bytes > 1.8e19 || bytes != std::floor(bytes)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("'%s' is not a whole number of bytes", text));
      }
      return static_cast<uint64_t>(bytes);
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "'%s': unknown unit '%s' (use KiB, MiB, GiB)", text, unit));
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int i = 0;
  while (v >= 1024 && i < 4) {
    v /= 1024;
    ++i;
  }
  if (v == std::floor(v)) return absl::StrFormat("%d%s", (int64_t)v, kNames[i]);
  return absl::StrFormat("%.1f%s", v, kNames[i]);
}

std::string FormatRate(double bytes_per_second) {
  return FormatBytes(static_cast<uint64_t>(std::max(0.0, bytes_per_second))) +
         "/s";
}

bool AbslParseFlag(absl::string_view text, ByteSize* out, std::string* error) {
  absl::StatusOr<uint64_t> b = ParseBytes(text);
  if (!b.ok()) {
    *error = std::string(b.status().message());
    return false;
  }
  out->bytes = *b;
  return true;
}

std::string AbslUnparseFlag(ByteSize size) { return FormatBytes(size.bytes); }

absl::StatusOr<uint64_t> ParseLinkRate(absl::string_view text) {
  const absl::string_view t = absl::StripAsciiWhitespace(text);
  // tc's rate units: SI multiples of bits, or of bytes ("bps").
  struct Unit {
    absl::string_view suffix;
    double bits;
  };
  static constexpr Unit kUnits[] = {
      {"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1},
      {"tbps", 8e12}, {"gbps", 8e9}, {"mbps", 8e6}, {"kbps", 8e3}, {"bps", 8},
  };
  const std::string lower = absl::AsciiStrToLower(t);
  for (const Unit& u : kUnits) {
    if (!absl::EndsWith(lower, u.suffix)) continue;
    double v = 0;
    const std::string number = lower.substr(0, lower.size() - u.suffix.size());
    if (!absl::SimpleAtod(number, &v) || !(v > 0) || v * u.bits > 1e14) {
      break;
    }
    return static_cast<uint64_t>(v * u.bits);
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "link rate '%s': want a positive number with a tc unit, e.g. 1gbit, "
      "500mbit, 100kbit or 12mbps (bytes)",
      t));
}

absl::StatusOr<uint64_t> ParseRate(absl::string_view text) {
  if (absl::StatusOr<uint64_t> bits = ParseLinkRate(text); bits.ok()) {
    return *bits / 8;
  }
  if (absl::StatusOr<uint64_t> bytes = ParseBytes(text); bytes.ok()) {
    return bytes;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "'%s' is not a rate (like 1gbit, 500mbit, or bytes: 100MB, 1GiB)", text));
}

bool AbslParseFlag(absl::string_view text, ByteRate* out, std::string* error) {
  absl::StatusOr<uint64_t> r = ParseRate(text);
  if (!r.ok()) {
    *error = std::string(r.status().message());
    return false;
  }
  out->bytes_per_s = *r;
  return true;
}

std::string AbslUnparseFlag(ByteRate rate) {
  return rate.bytes_per_s == 0 ? "0" : FormatBytes(rate.bytes_per_s);
}

bool IsBinaryFlag(absl::string_view flag_file, absl::string_view main_file) {
  return absl::EndsWith(main_file, flag_file) ||
         absl::EndsWith(flag_file, main_file) ||
         absl::EndsWith(flag_file, "tools/common/auth_flags.cc") ||
         absl::EndsWith(flag_file, "tools/common/channel_flags.cc");
}

void InitBinary(int argc, char** argv, absl::string_view usage,
                absl::string_view main_file) {
  absl::SetProgramUsageMessage(absl::StrCat(
      usage,
      "\nFlags may be spelled with dashes or underscores (--packet-pages)."));
  absl::FlagsUsageConfig config;
  config.contains_help_flags =
      [file = std::string(main_file)](absl::string_view f) {
        return IsBinaryFlag(f, file);
      };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  AcceptDashedFlags(argc, argv);
  absl::ParseCommandLine(argc, argv);
}

void AcceptDashedFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (a[0] != '-' || a[1] != '-') continue;
    if (a[2] == '\0') return;  // "--": the rest are not flags
    for (char* c = a + 2; *c != '\0' && *c != '='; ++c) {
      if (*c == '-') *c = '_';
    }
  }
}

void AcceptBareFlag(int argc, char** argv, absl::string_view name,
                    const char* replacement) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") return;
    if (!absl::ConsumePrefix(&a, "--") && !absl::ConsumePrefix(&a, "-")) {
      continue;
    }
    if (a.size() != name.size()) continue;
    bool same = true;
    for (size_t k = 0; k < a.size() && same; ++k) {
      const char c = a[k] == '-' ? '_' : a[k];
      same = c == (name[k] == '-' ? '_' : name[k]);
    }
    // argv's strings are not ours to resize: point at the replacement.
    if (same) argv[i] = const_cast<char*>(replacement);
  }
}

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

double ThreadCpuSeconds() {
  return static_cast<double>(base::ThreadCpuNs()) * 1e-9;
}

namespace {
double MonotonicSeconds() {
  return static_cast<double>(base::MonotonicNs()) * 1e-9;
}
}  // namespace

ProgressLine::ProgressLine(bool enabled, double min_interval_s)
    : enabled_(enabled),
      tty_(isatty(STDERR_FILENO) == 1),
      min_interval_s_(tty_ ? 0.1 : min_interval_s) {}

ProgressLine::~ProgressLine() { Done(); }

void ProgressLine::Update(absl::string_view text, bool force) {
  if (!enabled_) return;
  double now = MonotonicSeconds();
  if (!force && now - last_ < min_interval_s_) return;
  last_ = now;
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%.*s", static_cast<int>(text.size()),
                 text.data());
    open_ = true;
  } else {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(text.size()), text.data());
  }
  std::fflush(stderr);
}

void ProgressLine::Done() {
  if (open_) {
    std::fputc('\n', stderr);
    open_ = false;
  }
}

}  // namespace ramferry::cli
