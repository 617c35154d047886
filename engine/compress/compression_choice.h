// Whether Compression::kAuto compresses a channel's next packet: the way
// that moves page bytes faster over this channel's link, from three
// measures the channel keeps.
//
//  - the link: wire bytes over the time the channel spent handing them
//    on (rate limit, seal, send), over the last packets of either way.
//    One send says nothing: a TCP send returns at once while its socket
//    buffer has room and then one send waits for the drain of several
//    packets, so the time a packet takes is not its own. Over many
//    packets the waits add up to the link's rate.
//  - the compressor: page bytes over the time compressing took (CPU).
//  - the ratio: page bytes in over wire bytes out, of compressed packets.
//
// Compressed, a channel moves min(compressor, link * ratio) page bytes a
// second; as they are, link. Compressing starts where it is a quarter
// faster (one noisy estimate does not turn it on) and stops where it is
// barely faster (under 5%: it costs CPU for little). While off, every
// kProbeEvery-th packet is compressed anyway so the compressor and the ratio
// stay current as the data changes.
//
// Delta encoding (engine/delta/) is judged by the same measures under
// another rule, Rule::kNoSlower: the channel thread encodes and then sends,
// one after the other, so encoded it moves 1 / (1/encoder + 1/(link *
// ratio)) page bytes a second, and the encoding stays on while that is
// within a few percent of the link alone. A delta's first sends of a page
// shrink nothing (ratio 1) but fill the cache the next round's deltas come
// from: they are worth it exactly where the link, not the encoder, is the
// bottleneck, which this rule says; on a link as fast as the encoder it
// says off.
//
// Invariants: the first packet is compressed (nothing is known of the
// compressor until then); until the link is measured over a few sends,
// nothing is compressed but the probes. Pure arithmetic, no clock: the caller
// passes times.
#ifndef RAMFERRY_ENGINE_COMPRESS_COMPRESSION_CHOICE_H_
#define RAMFERRY_ENGINE_COMPRESS_COMPRESSION_CHOICE_H_

#include <cstdint>

namespace ramferry::engine {

class CompressionChoice {
 public:
  static constexpr uint64_t kProbeEvery = 32;

  enum class Rule {
    kFaster,    // compression: on where it moves page bytes faster
    kNoSlower,  // delta encoding: on where it costs (almost) no speed
  };
  explicit CompressionChoice(Rule rule = Rule::kFaster) : rule_(rule) {}

  // Whether to compress the next packet.
  bool Next();
  // A packet went through the compressor: `page_bytes` in, `wire_bytes`
  // out (page_bytes where it would not shrink), taking `ns`.
  void Compressed(uint64_t page_bytes, uint64_t wire_bytes, uint64_t ns);
  // A packet's `wire_bytes` took `ns` to be handed to the link.
  void Sent(uint64_t wire_bytes, uint64_t ns);

  bool compressing() const { return compressing_; }
  // The estimates, bytes per second (0: not measured yet).
  double link_bytes_per_s() const { return link_.PerSecond(); }
  double compressor_bytes_per_s() const { return compressor_.PerSecond(); }
  double ratio() const;

 private:
  // Bytes and time, each decaying per sample, so a long wait weighs by
  // its length, not as one sample among many that took none.
  struct Rate {
    double bytes = 0, ns = 0;
    void Add(uint64_t b, uint64_t t, double keep);
    double PerSecond() const { return ns > 0 ? bytes * 1e9 / ns : 0; }
  };
  // Whether encoding pays on a link of `link` bytes a second whose bytes
  // carry `link_times_ratio` page bytes a second once encoded.
  bool Pays(double link, double link_times_ratio) const;

  Rule rule_;
  Rate link_, compressor_;
  double ratio_out_ = 0;  // wire bytes of compressed packets, decaying
  bool compressing_ = false;
  uint64_t since_probe_ = 0;
  uint64_t sends_ = 0;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_COMPRESS_COMPRESSION_CHOICE_H_
