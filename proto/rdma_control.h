// Control messages that ride an RDMA channel's queue pair as SENDs, beside
// packet headers (told apart by their magic): chunk registration on
// demand, zero chunks, the keys of pinned regions, and the receive
// credits that keep the source's SENDs within the destination's posted
// receives.
//
// Message (big-endian): u32 magic 'RFRC', u16 type, u16 count, then
//   REGION_KEYS:      count x {u32 region, u32 rkey, u64 addr, u64 length}
//   REGISTER_REQUEST: count x {u32 region, u32 chunk}
//   REGISTER_RESULT:  count x {u32 rkey, u32 reserved(0), u64 addr}
//   COMPRESS:         count x {u32 region, u32 chunk}
//   CREDITS:          count = 1: {u32 receives, u32 reserved(0)}; the first
//                     grants the destination's whole receive queue, each
//                     later one returns receives it has posted again
#ifndef RAMFERRY_PROTO_RDMA_CONTROL_H_
#define RAMFERRY_PROTO_RDMA_CONTROL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ramferry::proto {

inline constexpr uint32_t kRdmaControlMagic = 0x52465243;  // "RFRC"
inline constexpr size_t kRdmaControlHeaderBytes = 8;
// Entries per message; a receive buffer holds the largest message.
inline constexpr uint16_t kMaxRdmaControlEntries = 128;

enum class RdmaControlType : uint16_t {
  kRegionKeys = 1,       // destination -> source, pin-all mode
  kRegisterRequest = 2,  // source -> destination
  kRegisterResult = 3,   // destination -> source
  kCompress = 4,         // source -> destination: zero-fill these chunks
  kCredits = 5,          // destination -> source, kFeatureRdmaCredits
};

struct RegionKey {
  uint32_t region = 0;
  uint32_t rkey = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
};
struct ChunkRef {
  uint32_t region = 0;
  uint32_t chunk = 0;
};
struct ChunkKey {
  uint32_t rkey = 0;
  uint64_t addr = 0;
};

struct RdmaControl {
  RdmaControlType type = RdmaControlType::kRegisterRequest;
  std::vector<RegionKey> region_keys;  // kRegionKeys
  std::vector<ChunkRef> chunks;        // kRegisterRequest, kCompress
  std::vector<ChunkKey> results;       // kRegisterResult
  uint32_t credits = 0;                // kCredits: at least 1
};

size_t RdmaControlMaxBytes();
// Whether a received message is a control message (by its magic).
bool IsRdmaControl(absl::Span<const uint8_t> message);
std::vector<uint8_t> EncodeRdmaControl(const RdmaControl& control);
// Validates magic, type, count against the type's bound and the message
// length exactly.
absl::StatusOr<RdmaControl> DecodeRdmaControl(absl::Span<const uint8_t> in);

}  // namespace ramferry::proto

#endif  // RAMFERRY_PROTO_RDMA_CONTROL_H_
