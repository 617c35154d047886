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
// another rule, Rule::kNoSlower, and one more: the CPU time each send took
// (`cpu_ns`), which tells a link that waits from one that works. The
// channel thread encodes, then sends; while the link is the bottleneck the
// socket drains meanwhile, so encoded the channel moves min(link * ratio,
// 1 / (1/encoder + 1/(send_cpu * ratio))) page bytes a second, send_cpu
// being the wire bytes a CPU second of sending puts out (the encoder is
// timed in CPU too). The encoding
// stays on while that keeps the link's speed, to a few percent. A delta's
// first sends of a page shrink nothing (ratio 1) but fill the cache the
// next round's deltas come from: on a link that waits (1 Gbit) they cost
// nothing, which this rule says; on loopback, where sending is a copy as
// fast as the encoder and the link is the channel's own CPU, it says off.
// Filling a slot first commits its memory, a cost paid once per slot
// (a first touch: on a VM that shadows page tables, up to tens of ms a
// packet): the caller passes it apart (fill_ns), and it is not judged as
// the encoder's speed, which would turn encoding off on a link that waits
// and keep it off, its probes filling fresh slots too (issue 42).
//
// Invariants: the first packet is compressed (nothing is known of the
// compressor until then); until the link is measured over a few sends,
// nothing is compressed but the probes (kNoSlower: everything is). Pure
// arithmetic, no clock: the caller passes times.
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
  // kNoSlower starts on: a delta's first sends fill the cache, and a page
  // not cached when its re-send comes goes whole again a round later.
  explicit CompressionChoice(Rule rule = Rule::kFaster)
      : rule_(rule), compressing_(rule == Rule::kNoSlower) {}

  // Whether to compress the next packet.
  bool Next();
  // A packet went through the compressor: `page_bytes` in, `wire_bytes`
  // out (page_bytes where it would not shrink), taking `ns`, of which
  // `fill_ns` went to committing memory written for the first time (a delta
  // cache's fresh slots): paid once per slot, so not the encoder's speed,
  // and left out of it.
  void Compressed(uint64_t page_bytes, uint64_t wire_bytes, uint64_t ns,
                  uint64_t fill_ns = 0);
  // A packet's `wire_bytes` took `ns` to be handed to the link, `cpu_ns`
  // of it this thread's CPU, after `before_ns` of preparing the packet
  // (kNoSlower; otherwise ignored). A send that waited for the link (most
  // of its time off the CPU) found the socket full: the link was busy
  // draining what came before all the while the packet was prepared, so
  // that time is the link's too. Judged by the send alone, a link that
  // drains while the channel encodes looks as fast as the encoding is slow.
  void Sent(uint64_t wire_bytes, uint64_t ns, uint64_t cpu_ns = 0,
            uint64_t before_ns = 0);

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
  Rate send_cpu_;         // wire bytes over the CPU time sending them took
  double ratio_out_ = 0;  // wire bytes of compressed packets, decaying
  bool compressing_;
  uint64_t since_probe_ = 0;
  uint64_t sends_ = 0;
  uint64_t encodes_ = 0;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_COMPRESS_COMPRESSION_CHOICE_H_
