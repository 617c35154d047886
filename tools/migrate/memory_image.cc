#include "tools/migrate/memory_image.h"

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "ramferry/region.h"

namespace ramferry::migrate {
namespace {

constexpr uint64_t kPage = kPageSize;
constexpr const char* kKindNames[kPageKinds] = {"zero", "untouched", "text",
                                                "random"};

// Words of assorted lengths, so the text compresses about as well as
// logs and program text do (zstd -1: roughly 3-4x), not infinitely.
constexpr const char* kWords[] = {"the",
                                  "memory",
                                  "page",
                                  "of",
                                  "migration",
                                  "channel",
                                  "round",
                                  "dirty",
                                  "kernel",
                                  "process",
                                  "0x7f3a",
                                  "ERROR",
                                  "info:",
                                  "value",
                                  "=",
                                  "{",
                                  "}",
                                  "return",
                                  "static",
                                  "int",
                                  "buffer",
                                  "size",
                                  "while",
                                  "struct",
                                  "request",
                                  "GET",
                                  "/api/v1/items",
                                  "200",
                                  "user_id",
                                  "timestamp",
                                  "2026-12-01T11:19:12Z",
                                  "null",
                                  "true",
                                  "false",
                                  "status",
                                  "queue"};

void FillText(uint8_t* p, uint64_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  uint64_t at = 0;
  while (at < bytes) {
    const char* w = kWords[rng() % std::size(kWords)];
    for (const char* c = w; *c != 0 && at < bytes; ++c) p[at++] = *c;
    if (at < bytes) p[at++] = rng() % 8 == 0 ? '\n' : ' ';
  }
}

}  // namespace

absl::StatusOr<MemoryImage> MemoryImage::Parse(absl::string_view text) {
  MemoryImage image;
  if (text == "random") return image;
  std::fill(std::begin(image.percent), std::end(image.percent), 0);
  uint32_t sum = 0;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const std::vector<absl::string_view> kv =
        absl::StrSplit(part, absl::MaxSplits('=', 1));
    int kind = -1;
    for (int k = 0; k < kPageKinds; ++k) {
      if (kv[0] == kKindNames[k]) kind = k;
    }
    uint32_t pct;
    if (kind < 0 || kv.size() != 2 || !absl::SimpleAtoi(kv[1], &pct) ||
        pct > 100) {
      return absl::InvalidArgumentError(absl::StrCat(
          "memory image '", text, "': '", part,
          "' is not KIND=PERCENT with KIND one of zero, untouched, text, "
          "random (e.g. zero=70,random=30)"));
    }
    image.percent[kind] += pct;
    sum += pct;
  }
  if (sum != 100) {
    return absl::InvalidArgumentError(absl::StrCat("memory image '", text,
                                                   "': the percentages sum to ",
                                                   sum, ", not 100"));
  }
  return image;
}

std::string MemoryImage::ToString() const {
  if (all_random()) return "random";
  std::string out;
  for (int k = 0; k < kPageKinds; ++k) {
    if (percent[k] == 0) continue;
    absl::StrAppend(&out, out.empty() ? "" : ",", kKindNames[k], "=",
                    percent[k]);
  }
  return out;
}

std::vector<PageRun> PlanImage(uint64_t pages, const MemoryImage& image,
                               uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 1);
  std::uniform_real_distribution<double> log_len(0, std::log(512.0));
  std::vector<PageRun> runs;
  uint64_t have[kPageKinds] = {};
  for (uint64_t at = 0; at < pages;) {
    const uint64_t len = std::min<uint64_t>(
        pages - at, static_cast<uint64_t>(std::exp(log_len(rng))));
    // The kind furthest behind its share of the pages placed so far (ties
    // broken at random), so every prefix of the image has about the
    // asked-for mix.
    int kind = -1;
    double worst = 0;
    const uint64_t placed = at + len;
    for (int k = 0; k < kPageKinds; ++k) {
      if (image.percent[k] == 0) continue;
      const double deficit = placed * image.percent[k] / 100.0 - have[k] +
                             (rng() % 1024) / 1024.0 * len * 0.5;
      if (kind < 0 || deficit > worst) {
        kind = k;
        worst = deficit;
      }
    }
    runs.push_back(
        {at, std::max<uint64_t>(len, 1), static_cast<PageKind>(kind)});
    have[kind] += runs.back().count;
    at += runs.back().count;
  }
  return runs;
}

std::vector<uint64_t> FillImage(uint8_t* base, absl::Span<const PageRun> runs,
                                uint64_t seed, int threads) {
  auto work = [&](int t) {
    for (size_t i = t; i < runs.size(); i += threads) {
      const PageRun& r = runs[i];
      uint8_t* p = base + r.first * kPage;
      const uint64_t bytes = r.count * kPage;
      switch (r.kind) {
        case PageKind::kZero:
          std::memset(p, 0, bytes);
          break;
        case PageKind::kUntouched:
          break;
        case PageKind::kText:
          FillText(p, bytes, seed ^ (r.first * 0x9e3779b97f4a7c15ull));
          break;
        case PageKind::kRandom:
          FillRandom(p, bytes, seed ^ (r.first * 0x9e3779b97f4a7c15ull), 1);
          break;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& t : pool) t.join();
  std::vector<uint64_t> counts(kPageKinds, 0);
  for (const PageRun& r : runs) counts[static_cast<int>(r.kind)] += r.count;
  return counts;
}

}  // namespace ramferry::migrate
