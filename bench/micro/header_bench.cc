// The data-packet header codec (proto/packet.h): what every page batch
// pays on send (encode) and on receive (decode + offset validation).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "proto/packet.h"

namespace ramferry::proto {
namespace {

constexpr uint32_t kPageSize = 4096;
constexpr uint64_t kRegionBytes = uint64_t{1} << 30;  // 1 GiB

PacketHeader DataHeader(uint32_t pages) {
  PacketHeader h;
  h.flags = kPacketData;
  h.channel = 3;
  h.page_count = pages;
  h.packet_num = 123456;
  h.round = 7;
  h.region_id = 1;
  h.page_size = kPageSize;
  return h;
}

// Ascending, scattered page offsets inside the region, as the scheduler
// produces them.
std::vector<uint64_t> Offsets(uint32_t pages) {
  std::vector<uint64_t> offsets(pages);
  for (uint32_t i = 0; i < pages; ++i) {
    offsets[i] = uint64_t{i} * 37 * kPageSize;
  }
  return offsets;
}

// EncodePacketHeader of a data packet of `pages` pages. Bytes are header
// bytes written (64 + 8 per page); items are headers.
void BM_Header_Encode(benchmark::State& state) {
  const uint32_t pages = static_cast<uint32_t>(state.range(0));
  const PacketHeader h = DataHeader(pages);
  const std::vector<uint64_t> offsets = Offsets(pages);
  std::vector<uint8_t> out(PacketHeaderBytes(pages));
  for (auto _ : state) {
    benchmark::DoNotOptimize(out.data());
    const size_t n = EncodePacketHeader(h, absl::MakeConstSpan(offsets),
                                        absl::MakeSpan(out));
    benchmark::DoNotOptimize(n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(out.size()));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_Header_Encode)->ArgName("pages")->Arg(1)->Arg(32)->Arg(128);

// DecodePacketFixed on the fixed 64 bytes, then DecodePageOffsets of the
// page offsets against a 1 GiB region: the receiver's per-packet
// validation. Bytes are header bytes read; items are headers.
void BM_Header_DecodeFixedAndOffsets(benchmark::State& state) {
  const uint32_t pages = static_cast<uint32_t>(state.range(0));
  const PacketHeader h = DataHeader(pages);
  const std::vector<uint64_t> offsets = Offsets(pages);
  std::vector<uint8_t> wire(PacketHeaderBytes(pages));
  EncodePacketHeader(h, absl::MakeConstSpan(offsets), absl::MakeSpan(wire));
  std::vector<uint64_t> decoded(pages);
  const absl::Span<const uint8_t> all = absl::MakeConstSpan(wire);
  for (auto _ : state) {
    benchmark::DoNotOptimize(wire.data());
    absl::StatusOr<PacketHeader> got =
        DecodePacketFixed(all.subspan(0, kPacketFixedBytes), h.channel,
                          kDefaultPacketPages, {.next_header_size = true});
    if (!got.ok()) {
      state.SkipWithError(got.status().ToString().c_str());
      break;
    }
    absl::Status s =
        DecodePageOffsets(*got, all.subspan(kPacketFixedBytes), kRegionBytes,
                          /*zero_pages=*/true, absl::MakeSpan(decoded));
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(decoded.data());
    benchmark::ClobberMemory();
  }
  if (!state.error_occurred() && decoded != offsets) {
    state.SkipWithError("decoded offsets differ");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(wire.size()));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_Header_DecodeFixedAndOffsets)->ArgName("pages")->Arg(128);

}  // namespace
}  // namespace ramferry::proto
