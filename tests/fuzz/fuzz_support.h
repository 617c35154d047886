// Shared by every fuzz target and by the corpus generator: the check macro
// a target uses for its properties, and the layout of the inputs whose
// first byte picks the decoder's parameters (so the fuzzer explores those
// too and the generator writes seeds the targets read the same way).
#ifndef RAMFERRY_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define RAMFERRY_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/types/span.h"
#include "proto/control.h"
#include "proto/seal.h"

// Aborts with the failed property: libFuzzer records the input as a crash,
// and the replay driver's ctest fails. Active in every build type, unlike
// assert().
#define FUZZ_CHECK(cond)                                                  \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, \
                   __LINE__, #cond);                                      \
      std::abort();                                                       \
    }                                                                     \
  } while (0)

// The entry point every target defines (libFuzzer's contract); the replay
// driver calls it once per corpus file.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace ramferry::fuzz {

// packet_header input: one config byte, then the header bytes.
//   bits 0-1: the channel the packet arrived on (0..3)
//   bits 2-3: the negotiated max pages per packet
//   bits 4-6: the length of the region the offsets are checked against
struct PacketHeaderConfig {
  uint32_t channel;
  uint32_t max_pages;
  uint64_t region_length;
  bool next_header_size;  // bit 7: kFeatureNextHeaderSize negotiated
};
inline constexpr uint32_t kFuzzMaxPages[4] = {1, 3, 128, 4096};
inline constexpr uint64_t kFuzzRegionLengths[8] = {
    0, 4096, 3 * 4096, 1ull << 20, 1ull << 40, ~0ull - 4095, ~0ull, 512};
inline PacketHeaderConfig DecodePacketHeaderConfig(uint8_t b) {
  return {b & 3u, kFuzzMaxPages[(b >> 2) & 3], kFuzzRegionLengths[(b >> 4) & 7],
          (b & 0x80) != 0};
}
inline uint8_t EncodePacketHeaderConfig(uint32_t channel, int max_pages_index,
                                        int region_length_index,
                                        bool next_header_size = false) {
  return static_cast<uint8_t>((channel & 3) | (max_pages_index & 3) << 2 |
                              (region_length_index & 7) << 4 |
                              (next_header_size ? 0x80 : 0));
}

// channel_receiver input: one config byte, then the received stream.
//   bits 0-1: the receiver's channel index (0..3)
//   bits 2-3: the negotiated max pages per packet (kFuzzMaxPages)
//   bit 4:    kFeatureNextHeaderSize negotiated (headers announce the next)
//   bit 5:    kFeatureZeroPages and kFeatureDeltaPages negotiated (zero
//             pages, ZERO_RANGES, delta records)
//   bit 6:    kFeatureCompressedPages negotiated (zstd frames as payload)
// The destination's regions are fixed (kFuzzRegions).
struct ReceiverConfig {
  uint32_t channel;
  uint32_t max_pages;
  bool next_header_size;
  bool zero_pages;
  bool compressed_pages;
  // The stream is sealed (encrypt) under kFuzzSealKey: every packet must
  // carry its tag in the header.
  bool sealed;
};
inline ReceiverConfig DecodeReceiverConfig(uint8_t b) {
  return {b & 3u,          kFuzzMaxPages[(b >> 2) & 3],
          (b & 0x10) != 0, (b & 0x20) != 0,
          (b & 0x40) != 0, (b & 0x80) != 0};
}
inline uint8_t EncodeReceiverConfig(uint32_t channel, int max_pages_index,
                                    bool next_header_size = false,
                                    bool zero_pages = false,
                                    bool compressed_pages = false,
                                    bool sealed = false) {
  return static_cast<uint8_t>(
      (channel & 3) | (max_pages_index & 3) << 2 |
      (next_header_size ? 0x10 : 0) | (zero_pages ? 0x20 : 0) |
      (compressed_pages ? 0x40 : 0) | (sealed ? 0x80 : 0));
}
// The fixed key a sealed fuzz stream is sealed under (its salt is zero).
inline proto::SealKey FuzzSealKey() {
  proto::SealKey k;
  for (size_t i = 0; i < k.key.size(); ++i) k.key[i] = static_cast<uint8_t>(i);
  return k;
}

struct FuzzRegionShape {
  uint32_t id;
  uint32_t page_size;
  uint32_t pages;
};
// Small regions with the page sizes that matter: the host's, one smaller
// (several tracking pages per host page) and one larger (a tracking page
// spanning host pages), and an id at the top of the range.
inline constexpr FuzzRegionShape kFuzzRegions[] = {
    {1, 4096, 4},
    {2, 512, 8},
    {0xfffffffeu, 8192, 2},
};

// missing_pages input: a MISSING_PAGES payload, decoded against these
// regions: kFuzzRegions and one of 2^28 pages, where a range's end can be
// large without wrapping.
inline std::vector<proto::RegionInfo> FuzzMissingPagesTable() {
  std::vector<proto::RegionInfo> t;
  for (const FuzzRegionShape& r : kFuzzRegions) {
    t.push_back({r.id, r.page_size, uint64_t{r.page_size} * r.pages, "r"});
  }
  t.push_back({3, 4096, uint64_t{4096} << 28, "big"});
  return t;
}

}  // namespace ramferry::fuzz

#endif  // RAMFERRY_TESTS_FUZZ_FUZZ_SUPPORT_H_
