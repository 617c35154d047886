#include "engine/compress/compression_choice.h"

#include <algorithm>

namespace ramferry::engine {
namespace {

// How much of the past each new sample keeps: the link is judged over
// about its last 32 packets, enough to span several socket-buffer drains;
// the compressor and the ratio, over its last 8 compressed packets.
constexpr double kLinkKeep = 31.0 / 32;
constexpr double kCompressorKeep = 7.0 / 8;
// Compressing starts where it moves pages this much faster...
constexpr double kTakeOver = 1.25;
// ... and keeps it while it is this much faster: a ratio that fades to
// one (random data) never quite reaches it.
constexpr double kKeep = 1.05;
// Sends measured before the link is judged at all: a socket's first
// sends (its buffer empty, or its first waits) say little of the link.
constexpr uint64_t kLinkSamples = 8;
// Rule::kNoSlower starts on and judges the encoder only over this many
// packets: a channel's first encodes fault in its staging buffer, and
// run several times slower than the rest (the cache's fresh slots are
// committed apart: fill_ns).
constexpr uint64_t kEncoderSamples = 8;
// Rule::kNoSlower: encoding starts where the channel keeps this much of
// its speed, and stays on while it keeps this much.
constexpr double kNoSlowerTakeOver = 0.97;
constexpr double kNoSlowerKeep = 0.93;

}  // namespace

void CompressionChoice::Rate::Add(uint64_t b, uint64_t t, double keep) {
  bytes = keep * bytes + static_cast<double>(b);
  ns = keep * ns + static_cast<double>(t);
}

// The compressor's decayed input is the ratio's numerator too.
double CompressionChoice::ratio() const {
  return ratio_out_ > 0 ? compressor_.bytes / ratio_out_ : 0;
}

void CompressionChoice::Compressed(uint64_t page_bytes, uint64_t wire_bytes,
                                   uint64_t ns, uint64_t fill_ns) {
  compressor_.Add(page_bytes, std::max<uint64_t>(ns - std::min(fill_ns, ns), 1),
                  kCompressorKeep);
  ratio_out_ = kCompressorKeep * ratio_out_ + static_cast<double>(wire_bytes);
  ++encodes_;
}

void CompressionChoice::Sent(uint64_t wire_bytes, uint64_t ns, uint64_t cpu_ns,
                             uint64_t before_ns) {
  const bool waited = rule_ == Rule::kNoSlower && ns > 2 * cpu_ns;
  link_.Add(wire_bytes, std::max<uint64_t>(ns + (waited ? before_ns : 0), 1),
            kLinkKeep);
  send_cpu_.Add(wire_bytes, std::max<uint64_t>(cpu_ns, 1), kLinkKeep);
  ++sends_;
}

bool CompressionChoice::Pays(double link, double link_times_ratio) const {
  const double encoder = compressor_.PerSecond();
  if (rule_ == Rule::kFaster) {
    const double on = std::min(encoder, link_times_ratio);
    return on > link * (compressing_ ? kKeep : kTakeOver);
  }
  if (encoder <= 0 || link_times_ratio <= 0) return false;
  // What a CPU second of this thread moves, encoding and then sending:
  // while it outruns the link, the link is still the bottleneck.
  const double ratio = link_times_ratio / link;
  const double cpu = 1 / (1 / encoder + 1 / (send_cpu_.PerSecond() * ratio));
  const double on = std::min(link_times_ratio, cpu);
  return on >= link * (compressing_ ? kNoSlowerKeep : kNoSlowerTakeOver);
}

bool CompressionChoice::Next() {
  if (compressor_.ns == 0) return true;
  const double link = link_.PerSecond();
  if (sends_ >= kLinkSamples &&
      (rule_ == Rule::kFaster || encodes_ >= kEncoderSamples)) {
    compressing_ = Pays(link, link * ratio());
  }
  if (compressing_) {
    since_probe_ = 0;
    return true;
  }
  if (++since_probe_ >= kProbeEvery) {
    since_probe_ = 0;
    return true;
  }
  return false;
}

}  // namespace ramferry::engine
