// Fuzzes the destination's per-packet state machine: ChannelReceiver's
// ReceiveOne, looped until it fails or reads FINISH, over a MemoryTransport
// that serves the input (after one config byte, see ReceiverConfig) as the
// bytes received on the channel, against the small real regions of
// kFuzzRegions.
//
// Properties, checked for every input:
//  - No byte outside the regions is written. Each region sits between two
//    canary pages (checked after every input) inside a mapping with
//    PROT_NONE guard pages beyond them (a far write crashes at once).
//  - Before any payload lands, its destination is exactly the pages the
//    packet's header names, in order, each wholly inside that region, less
//    the zero pages (with kFeatureZeroPages): the header is re-read here from
//    the stream, independently of the decoders.
//  - A compressed payload (kFeatureCompressedPages) is read into a buffer of
//    exactly its stated size, which is smaller than the pages it names;
//    what it expands to lands only in those pages (the canaries). A sealed
//    payload is read into the named pages themselves and opened there.
//  - Each SYNC reports the pages applied in its round, rounds in order (with
//    kFeatureZeroPages, at least those: ZERO_RANGES pages come on top). Zero
//    pages and ranges are applied to memory that is not known to read as
//    zero, so each is really written, and the canaries catch a stray one.
//  - With kFeatureZeroPages, stream packets are taken too: each payload
//    is read aside, outside every region, exactly its stated length, and
//    reaches the sink only whole.
//  - Every call consumes input (no hang), and every failure is one a
//    hostile or truncated stream explains: INVALID_ARGUMENT, OUT_OF_RANGE,
//    or UNAVAILABLE at the end of the stream; on a sealed stream (config
//    bit 0x80, under FuzzSealKey), PERMISSION_DENIED for a packet whose
//    tag fails, decrypting in place only the pages the header names.
#include <sys/uio.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/channel_receiver.h"
#include "engine/failure.h"
#include "engine/pages/held_pages.h"
#include "engine/pages/unauthentic_pages.h"
#include "engine/pages/zero_pages.h"
#include "engine/region_table.h"
#include "engine/round_barrier.h"
#include "engine/stream/stream_cursor.h"
#include "engine/stream/stream_sink.h"
#include "proto/packet.h"
#include "proto/wire.h"
#include "ramferry/region.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/support/memory_transport.h"

namespace ramferry::fuzz {
namespace {

constexpr size_t kCanaryBytes = 4096;
constexpr uint8_t kCanary = 0xA5;

// One region and the canary pages around it, on a guarded mapping.
struct GuardedRegion {
  std::unique_ptr<MappedMemory> memory;
  Region region;
};

// Allocated once: mmap per input would dominate the fuzzer's time.
std::vector<GuardedRegion>& Regions() {
  static std::vector<GuardedRegion>* regions = [] {
    auto* out = new std::vector<GuardedRegion>();
    for (const FuzzRegionShape& shape : kFuzzRegions) {
      const uint64_t length = uint64_t{shape.pages} * shape.page_size;
      const uint64_t mapped = (length + 4095) / 4096 * 4096 + 2 * kCanaryBytes;
      absl::StatusOr<std::unique_ptr<MappedMemory>> m =
          MappedMemory::Allocate(mapped, {.guard_pages = true});
      FUZZ_CHECK(m.ok());
      GuardedRegion g;
      g.memory = std::move(*m);
      g.region.id = shape.id;
      g.region.name = "fuzz";
      g.region.base = g.memory->data() + kCanaryBytes;
      g.region.length = length;
      g.region.page_size = shape.page_size;
      FUZZ_CHECK(ValidateRegion(g.region).ok());
      out->push_back(std::move(g));
    }
    return out;
  }();
  return *regions;
}

const Region* FindRegion(uint32_t id) {
  for (const GuardedRegion& g : Regions()) {
    if (g.region.id == id) return &g.region;
  }
  return nullptr;
}

// Checks a payload's destination against the header of its packet, which
// starts at `packet_at` in `stream`; the payload starts at `payload_at`.
void CheckPayloadTarget(absl::Span<const uint8_t> stream, size_t packet_at,
                        size_t payload_at, absl::Span<const iovec> dst,
                        uint64_t* pages) {
  // Read here with raw loads, not the decoders under test.
  FUZZ_CHECK(payload_at >= packet_at + proto::kPacketFixedBytes);
  const uint8_t* fixed = stream.data() + packet_at;
  const uint32_t page_count = proto::Load32(fixed + 12);
  FUZZ_CHECK(proto::Load32(fixed) == proto::kPacketMagic);
  FUZZ_CHECK(payload_at - packet_at == proto::PacketHeaderBytes(page_count));
  size_t count = 0;
  for (const iovec& v : dst) count += v.iov_len;
  auto outside_regions = [&](const iovec& v) {
    auto* p = static_cast<uint8_t*>(v.iov_base);
    for (const GuardedRegion& g : Regions()) {
      const uint8_t* m = g.memory->data();
      FUZZ_CHECK(p + v.iov_len <= m || p >= m + g.memory->size());
    }
  };
  // A stream's payload (with kFeatureZeroPages, streams are on too) is
  // read aside, never into a region, exactly its stated length.
  if (proto::Load16(fixed + 6) == proto::kPacketStream) {
    FUZZ_CHECK(page_count == 0 && dst.size() == 1);
    FUZZ_CHECK(count == proto::Load32(fixed + 36));
    outside_regions(dst[0]);
    return;
  }
  const Region* r = FindRegion(proto::Load32(fixed + 32));
  FUZZ_CHECK(r != nullptr);
  FUZZ_CHECK(proto::Load32(fixed + 36) == r->page_size);

  // The pages the header names, in order, each inside the region; a zero
  // page is named too but is not in the payload.
  // Delta records (their size in an entry's low bits) come after the
  // pages, read aside.
  auto* base = static_cast<uint8_t*>(r->base);
  std::vector<uint8_t*> want;
  uint64_t record_bytes = 0;
  for (uint32_t i = 0; i < page_count; ++i) {
    const uint64_t entry =
        proto::Load64(fixed + proto::kPacketFixedBytes + 8 * i);
    const uint64_t low = entry & (r->page_size - 1);
    const uint64_t off = entry - low;
    FUZZ_CHECK(low == 0 || low == proto::kZeroPageFlag || low % 2 == 0);
    FUZZ_CHECK(off < r->length && r->length - off >= r->page_size);
    if (low == 0) want.push_back(base + off);
    if (low != proto::kZeroPageFlag) record_bytes += low / 2;
  }
  // A compressed frame is read into one buffer of its own, outside every
  // region. (A sealed payload goes to its pages, as a plain one does.)
  if (const uint32_t compressed = proto::Load32(fixed + 44); compressed != 0) {
    FUZZ_CHECK(compressed < want.size() * r->page_size + record_bytes);
    FUZZ_CHECK(dst.size() == 1 && count == compressed);
    outside_regions(dst[0]);
    *pages += page_count;
    return;
  }
  FUZZ_CHECK(count == want.size() * r->page_size + record_bytes);
  if (record_bytes != 0) {
    FUZZ_CHECK(dst.back().iov_len == record_bytes);
    outside_regions(dst.back());
    dst.remove_suffix(1);
  }
  // The pages the receiver is about to fill, in order.
  std::vector<uint8_t*> got;
  for (const iovec& v : dst) {
    FUZZ_CHECK(v.iov_len > 0 && v.iov_len % r->page_size == 0);
    auto* p = static_cast<uint8_t*>(v.iov_base);
    FUZZ_CHECK(p >= base && p + v.iov_len <= base + r->length);
    for (size_t at = 0; at < v.iov_len; at += r->page_size) {
      got.push_back(p + at);
    }
  }
  FUZZ_CHECK(got == want);
  *pages += page_count;
}

// Takes stream packets as a session's sink would, through a cursor per
// stream: what reaches it is whole and of a valid stream.
class FuzzStreamSink : public engine::StreamSink {
 public:
  absl::Status Take(const proto::StreamFrame& frame,
                    absl::Span<const uint8_t> payload) override {
    FUZZ_CHECK(frame.stream < proto::kMaxStreams);
    FUZZ_CHECK(payload.size() == frame.bytes);
    auto [it, added] = cursors_.try_emplace(frame.stream, frame.stream);
    absl::StatusOr<absl::Span<const uint8_t>> fresh =
        it->second.Take(frame, payload);
    if (!fresh.ok()) return fresh.status();
    FUZZ_CHECK(fresh->size() <= payload.size());
    return absl::OkStatus();
  }

 private:
  std::map<uint32_t, engine::StreamCursor> cursors_;
};

void ResetCanaries() {
  for (GuardedRegion& g : Regions()) {
    std::memset(g.memory->data(), kCanary, g.memory->size());
  }
}

void CheckCanaries() {
  for (const GuardedRegion& g : Regions()) {
    const uint8_t* m = g.memory->data();
    const auto* base = static_cast<const uint8_t*>(g.region.base);
    const uint8_t* end = base + g.region.length;
    for (const uint8_t* p = m; p < base; ++p) FUZZ_CHECK(*p == kCanary);
    for (const uint8_t* p = end; p < m + g.memory->size(); ++p) {
      FUZZ_CHECK(*p == kCanary);
    }
  }
}

void FuzzChannelReceiver(absl::Span<const uint8_t> in) {
  if (in.empty()) return;
  const ReceiverConfig cfg = DecodeReceiverConfig(in[0]);
  const absl::Span<const uint8_t> stream = in.subspan(1);

  std::vector<Region> regions;
  for (const GuardedRegion& g : Regions()) regions.push_back(g.region);
  ResetCanaries();
  engine::RegionTable table(regions);

  uint64_t round_pages = 0;  // payload pages seen since the last SYNC
  uint64_t rounds = 0;
  engine::RoundBarrier barrier(
      std::vector<uint32_t>{cfg.channel}, [&](uint64_t round, uint64_t pages) {
        FUZZ_CHECK(round == rounds);
        FUZZ_CHECK(cfg.zero_pages ? pages >= round_pages
                                  : pages == round_pages);
        ++rounds;
        round_pages = 0;
        return absl::OkStatus();
      });
  engine::SessionFailure failure([](const absl::Status&, engine::Origin) {});

  testing::MemoryTransport* transport = nullptr;
  auto owned = std::make_unique<testing::MemoryTransport>(
      stream, [&](absl::Span<const iovec> dst) {
        CheckPayloadTarget(stream, transport->packet_start(),
                           transport->position(), dst, &round_pages);
      });
  transport = owned.get();
  engine::ZeroPages zero_pages(regions);
  engine::HeldPages held(regions);
  engine::UnauthenticPages unauthentic(regions);
  FuzzStreamSink streams;
  std::unique_ptr<proto::Sealer> opener;
  if (cfg.sealed) {
    absl::StatusOr<std::unique_ptr<proto::Sealer>> o = proto::Sealer::Create(
        proto::SealMode::kEncrypt, FuzzSealKey(), proto::Sealer::Use::kOpen);
    FUZZ_CHECK(o.ok());
    opener = std::move(*o);
  }
  engine::ChannelReceiver rx(
      cfg.channel, std::move(owned), &table,
      {.max_pages = cfg.max_pages,
       .next_header_size = cfg.next_header_size,
       .compressed_pages = cfg.compressed_pages,
       .landings = {.held = cfg.zero_pages ? &held : nullptr,
                    .zeros = cfg.zero_pages ? &zero_pages : nullptr,
                    .unauthentic = cfg.sealed ? &unauthentic : nullptr},
       .streams = cfg.zero_pages ? &streams : nullptr},
      &barrier, &failure, nullptr, std::move(opener));

  int idle_steps = 0;
  while (true) {
    const size_t before = transport->position();
    absl::StatusOr<engine::ChannelReceiver::Step> step = rx.ReceiveOne();
    if (!step.ok()) {
      const absl::StatusCode code = step.status().code();
      FUZZ_CHECK(code == absl::StatusCode::kInvalidArgument ||
                 code == absl::StatusCode::kOutOfRange ||
                 code == absl::StatusCode::kUnavailable ||
                 (cfg.sealed && code == absl::StatusCode::kPermissionDenied));
      FUZZ_CHECK(!rx.finished());
      break;
    }
    // A step reads bytes, or handles the one header the previous payload
    // read brought with it: never two steps without progress.
    idle_steps = transport->position() > before ? 0 : idle_steps + 1;
    FUZZ_CHECK(idle_steps <= 1);
    if (*step == engine::ChannelReceiver::Step::kFinished) {
      FUZZ_CHECK(rx.finished());
      break;
    }
  }
  CheckCanaries();
}

}  // namespace
}  // namespace ramferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramferry::fuzz::FuzzChannelReceiver({data, size});
  return 0;
}
