// PacketCompressor / PacketDecompressor: what a frame of a packet's pages
// must be for the destination to expand it, and every way a hostile frame
// is refused without a byte written outside the pages.
#include "engine/compress/compressor.h"

#include <zstd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::engine {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> TextBytes(size_t n, uint64_t seed) {
  static const char* kWords[] = {"page ",    "round ", "channel ", "dirty ",
                                 "memory\n", "0x7f ",  "value=",   "ok "};
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out;
  while (out.size() < n) {
    const char* w = kWords[rng() % 8];
    out.insert(out.end(), w, w + std::strlen(w));
  }
  out.resize(n);
  return out;
}

// Pages at 4 KiB steps inside one buffer with canary bytes between and
// around them: `pages` runs of one page each, a page apart.
struct Pages {
  explicit Pages(size_t pages) : buf((2 * pages + 1) * 4096, 0xA5) {
    for (size_t i = 0; i < pages; ++i) {
      runs.push_back({buf.data() + (2 * i + 1) * 4096, 4096});
    }
  }
  bool CanariesIntact() const {
    for (size_t i = 0; i < buf.size(); i += 4096) {
      if ((i / 4096) % 2 == 1) continue;
      for (size_t k = 0; k < 4096; ++k) {
        if (buf[i + k] != 0xA5) return false;
      }
    }
    return true;
  }
  std::vector<uint8_t> buf;
  std::vector<iovec> runs;
};

// One zstd frame of `data`; `pledge`: its header states the size.
std::vector<uint8_t> Frame(const std::vector<uint8_t>& data, bool pledge) {
  std::vector<uint8_t> out(ZSTD_compressBound(data.size()));
  ZSTD_CCtx* c = ZSTD_createCCtx();
  if (pledge) {
    ZSTD_CCtx_setPledgedSrcSize(c, data.size());
  } else {
    ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
  }
  ZSTD_outBuffer o{out.data(), out.size(), 0};
  ZSTD_inBuffer i{data.data(), data.size(), 0};
  EXPECT_EQ(ZSTD_compressStream2(c, &o, &i, ZSTD_e_end), 0u);
  ZSTD_freeCCtx(c);
  out.resize(o.pos);
  return out;
}

TEST(CompressorTest, TextRoundTripsAcrossRuns) {
  auto comp = PacketCompressor::Create(1);
  auto decomp = PacketDecompressor::Create();
  ASSERT_OK(comp);
  ASSERT_OK(decomp);
  std::vector<uint8_t> text = TextBytes(5 * 4096, 1);
  std::vector<iovec> src;
  for (size_t i = 0; i < 5; ++i) src.push_back({text.data() + i * 4096, 4096});
  std::vector<uint8_t> frame(kMaxCompressedPayload);
  const size_t n = (*comp)->Compress(src, absl::MakeSpan(frame));
  ASSERT_GT(n, 0u);
  EXPECT_LT(n, text.size() / 2) << "text should shrink well";
  Pages dst(5);
  ASSERT_OK(
      (*decomp)->Decompress(absl::MakeConstSpan(frame.data(), n), dst.runs));
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(std::memcmp(dst.runs[i].iov_base, text.data() + i * 4096, 4096),
              0);
  }
  EXPECT_TRUE(dst.CanariesIntact());
}

TEST(CompressorTest, IncompressibleOrOversizedPayloadsAreNotCompressed) {
  auto comp = PacketCompressor::Create(1);
  ASSERT_OK(comp);
  std::vector<uint8_t> noise(8 * 4096);
  std::mt19937_64 rng(2);
  for (auto& b : noise) b = static_cast<uint8_t>(rng());
  iovec run{noise.data(), noise.size()};
  std::vector<uint8_t> out(kMaxCompressedPayload);
  EXPECT_EQ((*comp)->Compress({&run, 1}, absl::MakeSpan(out)), 0u);
  std::vector<uint8_t> big(kMaxCompressedPayload + 4096, 0);
  iovec all{big.data(), big.size()};
  EXPECT_EQ((*comp)->Compress({&all, 1}, absl::MakeSpan(out)), 0u);
  EXPECT_EQ((*comp)->Compress({}, absl::MakeSpan(out)), 0u);
}

TEST(CompressorTest, HostileFramesAreRefusedAndWriteNothingOutside) {
  auto decomp = PacketDecompressor::Create();
  ASSERT_OK(decomp);
  const std::vector<uint8_t> two_pages = TextBytes(2 * 4096, 3);
  const std::vector<uint8_t> good = Frame(two_pages, true);
  struct Case {
    std::string why;
    std::vector<uint8_t> frame;
    size_t pages;
    const char* want;
  };
  std::vector<Case> cases;
  cases.push_back({"declares more than the pages hold", good, 1,
                   "not a frame of the 4096 bytes"});
  cases.push_back({"declares less than the pages hold", good, 3,
                   "not a frame of the 12288 bytes"});
  // A bomb: 64 MiB of zeros in a few KiB, aimed at one page.
  cases.push_back({"decompression bomb",
                   Frame(std::vector<uint8_t>(64u << 20, 0), true), 1,
                   "not a frame"});
  cases.push_back(
      {"no declared size", Frame(two_pages, false), 2, "not a frame"});
  std::vector<uint8_t> cut(good.begin(), good.end() - 5);
  cases.push_back({"truncated", cut, 2, ""});
  std::vector<uint8_t> trailing = good;
  trailing.insert(trailing.end(), {1, 2, 3});
  cases.push_back({"bytes after the frame", trailing, 2, "after its frame"});
  std::vector<uint8_t> corrupt = good;
  for (size_t i = 12; i < corrupt.size(); i += 7) corrupt[i] ^= 0x5a;
  cases.push_back({"corrupt", corrupt, 2, ""});
  cases.push_back({"empty", {}, 2, "not a frame"});
  cases.push_back({"not zstd", std::vector<uint8_t>(100, 7), 2, "not a frame"});
  for (const Case& c : cases) {
    Pages dst(c.pages);
    absl::Status s = (*decomp)->Decompress(c.frame, dst.runs);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << c.why << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.want)) << c.why;
    EXPECT_TRUE(dst.CanariesIntact()) << c.why;
  }
  // And the good frame still expands after all that.
  Pages dst(2);
  EXPECT_OK((*decomp)->Decompress(good, dst.runs));
  EXPECT_EQ(std::memcmp(dst.runs[1].iov_base, two_pages.data() + 4096, 4096),
            0);
}

}  // namespace
}  // namespace ramferry::engine
