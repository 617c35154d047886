#include "engine/compress/compression_choice.h"

#include <algorithm>
#include <cstdint>

#include "gtest/gtest.h"

namespace ramferry::engine {
namespace {

constexpr uint64_t kPacket = 128 << 10;
constexpr uint64_t kMs = 1000 * 1000;

// Drives a choice the way a channel does, over a link that a TCP socket
// fronts: `burst` sends return at once, then one waits for the drain of
// all of them at `link` bytes per ms. The compressor runs at `compressor`
// bytes per ms and shrinks pages `ratio` times. A send's CPU is its copy
// into the socket buffer, or, `cpu_bound` (loopback, where the link is a
// copy), all of it. Returns how many of `packets` went compressed.
uint64_t Drive(CompressionChoice& c, uint64_t packets, double link,
               double compressor, double ratio, int burst = 6,
               bool cpu_bound = false) {
  uint64_t compressed = 0, queued = 0;
  int in_burst = 0;
  for (uint64_t i = 0; i < packets; ++i) {
    uint64_t wire = kPacket;
    if (c.Next()) {
      ++compressed;
      wire = static_cast<uint64_t>(kPacket / ratio);
      c.Compressed(kPacket, wire,
                   static_cast<uint64_t>(kPacket / compressor * kMs));
    }
    queued += wire;
    uint64_t ns = 20'000;  // a copy into the socket buffer
    if (++in_burst == burst) {
      ns = static_cast<uint64_t>(queued / link * kMs);
      queued = 0;
      in_burst = 0;
    }
    c.Sent(wire, ns, cpu_bound ? ns : std::min<uint64_t>(ns, 20'000));
  }
  return compressed;
}

TEST(CompressionChoiceTest, TheFirstPacketIsCompressedToMeasureTheCompressor) {
  CompressionChoice c;
  EXPECT_TRUE(c.Next());
  EXPECT_EQ(c.compressor_bytes_per_s(), 0);
}

TEST(CompressionChoiceTest, ASlowLinkIsJudgedOverItsDrainsNotOneSend) {
  // 12.5 MB/s (100 Mbit), a 300 MB/s compressor, text (4x): whichever
  // send happens to wait for the drain, compressing wins, and stays on.
  CompressionChoice c;
  const uint64_t n = Drive(c, 128, 12'500, 300'000, 4.0);
  EXPECT_GT(n, 100u);
  EXPECT_TRUE(c.compressing());
  EXPECT_NEAR(c.link_bytes_per_s(), 12.5e6, 4e6);
  EXPECT_NEAR(c.ratio(), 4.0, 0.01);
}

TEST(CompressionChoiceTest, ALinkFasterThanTheCompressorLeavesItOff) {
  // 2 GB/s against 300 MB/s: only the probes are compressed.
  CompressionChoice c;
  const uint64_t n = Drive(c, 256, 2'000'000, 300'000, 4.0);
  EXPECT_LE(n, 256 / CompressionChoice::kProbeEvery + 2);
  EXPECT_FALSE(c.compressing());
}

TEST(CompressionChoiceTest, DataThatDoesNotShrinkGoesAsItIs) {
  CompressionChoice c;
  const uint64_t n = Drive(c, 256, 12'500, 300'000, 1.0);
  EXPECT_LE(n, 256 / CompressionChoice::kProbeEvery + 2);
  EXPECT_FALSE(c.compressing());
}

TEST(CompressionChoiceTest, FollowsTheDataWhenItStopsShrinking) {
  CompressionChoice c;
  Drive(c, 128, 12'500, 300'000, 4.0);
  ASSERT_TRUE(c.compressing());
  // Random pages from now on: every compressed packet shows it, so the
  // choice turns as the ratio's memory fades (a few dozen packets), not
  // at a probe.
  Drive(c, 48, 12'500, 300'000, 1.0);
  EXPECT_FALSE(c.compressing());
  // And back, by the probes.
  Drive(c, 8 * CompressionChoice::kProbeEvery, 12'500, 300'000, 4.0);
  EXPECT_TRUE(c.compressing());
}

TEST(CompressionChoiceTest, NothingButProbesBeforeTheLinkIsMeasured) {
  CompressionChoice c;
  ASSERT_TRUE(c.Next());
  c.Compressed(kPacket, kPacket / 4, kMs);
  for (uint64_t i = 1; i < CompressionChoice::kProbeEvery; ++i) {
    EXPECT_FALSE(c.Next()) << i;
  }
  EXPECT_TRUE(c.Next());
}

TEST(CompressionChoiceTest, ASlowFirstSendAloneDoesNotTurnItOn) {
  // A cold socket's first send waits (a handshake's tail, a page fault):
  // judged alone it would look like a 1 MB/s link.
  CompressionChoice c;
  ASSERT_TRUE(c.Next());
  c.Compressed(kPacket, kPacket / 4, kPacket / 300'000 * kMs);
  c.Sent(kPacket / 4, 32 * kMs);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(c.Next()) << i;
    c.Sent(kPacket, 50'000);
  }
}

TEST(CompressionChoiceTest, AQuarterFasterTakesOverAndNoLess) {
  // Compressed moves min(compressor, link * ratio): 1.2x the link is not
  // enough to turn on; 1.5x is.
  CompressionChoice below;
  Drive(below, 256, 100'000, 120'000, 4.0, /*burst=*/1);
  EXPECT_FALSE(below.compressing());
  CompressionChoice above;
  Drive(above, 256, 100'000, 150'000, 4.0, /*burst=*/1);
  EXPECT_TRUE(above.compressing());
}

// Rule::kNoSlower (--delta=auto): on where encoding costs the channel no
// speed, even where it shrinks nothing yet (a page's first re-send fills
// the cache the next round's deltas come from).
TEST(CompressionChoiceTest, NoSlowerEncodesOnASlowLinkEvenWithoutShrinking) {
  // 31 MB/s a channel (a 1 Gbit link over four), an encoder at 400 MB/s
  // (its fresh slots faulting in): the socket drains while it encodes.
  CompressionChoice c(CompressionChoice::Rule::kNoSlower);
  const uint64_t n = Drive(c, 128, 31'000, 400'000, 1.0);
  EXPECT_GT(n, 100u);
  EXPECT_TRUE(c.compressing());
}

TEST(CompressionChoiceTest, NoSlowerStaysOffOnALinkAsFastAsTheEncoder) {
  // Loopback, where sending is the thread's own copy: 2 GB/s against a
  // 3 GB/s encoder that shrinks nothing (whole pages rewritten): encoding
  // first would cost the channel a third.
  CompressionChoice c(CompressionChoice::Rule::kNoSlower);
  const uint64_t n = Drive(c, 256, 2'000'000, 3'000'000, 1.0, 6,
                           /*cpu_bound=*/true);
  EXPECT_FALSE(c.compressing());
  // The sends before the link is judged, then the probes.
  EXPECT_LE(n, 256u / CompressionChoice::kProbeEvery + 10);
}

TEST(CompressionChoiceTest, NoSlowerEncodesOnAFastLinkWhereDeltasShrink) {
  // The same loopback with small deltas (100x): encoding 4 KiB into tens
  // of bytes beats sending the page.
  CompressionChoice c(CompressionChoice::Rule::kNoSlower);
  Drive(c, 256, 2'000'000, 3'000'000, 100.0, 6, /*cpu_bound=*/true);
  EXPECT_TRUE(c.compressing());
}

}  // namespace
}  // namespace ramferry::engine
