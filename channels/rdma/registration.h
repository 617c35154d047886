// rdma_registration: which chunks of a region an RDMA channel may WRITE
// into, and what the source must ask for first (see rdma.h for the
// protocol). No verbs here: memory registration is the caller's, handed in
// as a callback where an answer needs one, so all of it can be tested
// without an RDMA device.
//
// A region is cut into chunks of `chunk_bytes` (the last one may be
// shorter). On demand, the source knows per chunk the destination's key
// (kKnown), that it went as zero (kZero: a COMPRESS, the destination
// zero-fills its pages) or nothing yet (kUnknown). The destination
// remembers which chunks were COMPRESSed and not registered since.
#ifndef RAMFERRY_CHANNELS_RDMA_REGISTRATION_H_
#define RAMFERRY_CHANNELS_RDMA_REGISTRATION_H_

#include <sys/uio.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/rdma_control.h"

namespace ramferry::channels {

struct RemoteChunk {
  enum State : uint8_t { kUnknown, kKnown, kZero } state = kUnknown;
  uint32_t rkey = 0;
  uint64_t addr = 0;
};

struct RdmaRegion {
  uint8_t* base = nullptr;
  uint64_t length = 0;
  std::vector<RemoteChunk> remote;  // source: the peer's keys, per chunk
  std::vector<bool> zero;           // destination: COMPRESSed, unregistered
  uint32_t remote_rkey = 0;         // source, pin-all
  uint64_t remote_addr = 0;         // source, pin-all
  uint64_t chunks() const { return remote.size(); }
};

// A packet's page runs: iov[i] lies at offsets[i] of the region.
struct PageRuns {
  uint32_t region = 0;
  absl::Span<const iovec> iov;
  absl::Span<const uint64_t> offsets;
};

// What a batch of packets needs before its WRITEs may be posted: one
// COMPRESS message per entry of `compress`, one REGISTER_REQUEST (and its
// REGISTER_RESULT) per entry of `register_batches`, in order.
struct RegistrationPlan {
  std::vector<std::vector<proto::ChunkRef>> compress;
  std::vector<std::vector<proto::ChunkRef>> register_batches;
};

class ChunkRegistry {
 public:
  explicit ChunkRegistry(uint64_t chunk_bytes) : chunk_bytes_(chunk_bytes) {}

  uint64_t chunk_bytes() const { return chunk_bytes_; }
  // Adds region `id`, every chunk unknown; returns its chunk count.
  uint64_t AddRegion(uint32_t id, uint8_t* base, uint64_t length);
  RdmaRegion& region(uint32_t id) { return regions_[id]; }
  const std::map<uint32_t, RdmaRegion>& regions() const { return regions_; }

  // A chunk the peer named: an error unless it lies in a region added here.
  absl::StatusOr<absl::Span<uint8_t>> ChunkSpan(
      const proto::ChunkRef& ref) const;
  bool ChunkIsZero(const RdmaRegion& r, uint64_t chunk) const;

  struct Piece {
    RdmaRegion* region;
    uint64_t chunk;
    uint64_t offset;  // in the region
    uint64_t length;
    uint8_t* addr;  // local
  };
  // Calls fn(piece) for each piece of `pages`, split at chunk boundaries.
  template <typename Fn>
  void ForEachPiece(const PageRuns& pages, Fn fn);

  // --- source, on demand ---

  // Decides the chunks `packets` touch that the destination has no key
  // for: an all-zero one becomes kZero and goes as COMPRESS (also when it
  // went so before); any other becomes kUnknown and is asked for, up to
  // `register_batch` chunks per request. Each chunk is decided once.
  RegistrationPlan Plan(absl::Span<const PageRuns> packets,
                        size_t register_batch);
  // Applies the REGISTER_RESULT `keys` that answers the request `batch`.
  absl::Status ApplyKeys(absl::Span<const proto::ChunkRef> batch,
                         absl::Span<const proto::ChunkKey> keys);

  // --- source, pin-all ---

  // Applies REGION_KEYS: each must name a region added here, of its length.
  absl::Status ApplyRegionKeys(absl::Span<const proto::RegionKey> keys);

  // --- destination ---

  // COMPRESS: only remembered. The packets that follow zero-fill their own
  // pages in these chunks (ZeroFillCompressed); filling the whole chunk
  // here would write pages another channel is placing in the same round.
  absl::Status MarkCompressed(absl::Span<const proto::ChunkRef> chunks);
  // A REGISTER_REQUEST: each chunk is no longer zero (the source WRITEs its
  // pages itself from now) and is answered with its address and the rkey
  // `register_chunk` gives for it.
  using RegisterChunk = absl::FunctionRef<absl::StatusOr<uint32_t>(
      const proto::ChunkRef&, absl::Span<uint8_t>)>;
  absl::StatusOr<std::vector<proto::ChunkKey>> AnswerRegisterRequest(
      absl::Span<const proto::ChunkRef> chunks, RegisterChunk register_chunk);
  // Zeroes the parts of `dst` (a packet's pages, inside added regions: the
  // engine checked them) that fall in chunks marked zero.
  void ZeroFillCompressed(absl::Span<const iovec> dst);
  // Chunks marked zero, all regions.
  int64_t zero_chunks() const { return zero_chunks_; }

 private:
  // `ref` was checked by ChunkSpan.
  void SetZeroChunk(const proto::ChunkRef& ref, bool zero);

  const uint64_t chunk_bytes_;
  std::map<uint32_t, RdmaRegion> regions_;
  int64_t zero_chunks_ = 0;
};

template <typename Fn>
void ChunkRegistry::ForEachPiece(const PageRuns& pages, Fn fn) {
  RdmaRegion& r = regions_[pages.region];
  for (size_t i = 0; i < pages.iov.size(); ++i) {
    uint64_t off = pages.offsets[i];
    uint64_t left = pages.iov[i].iov_len;
    auto* addr = static_cast<uint8_t*>(pages.iov[i].iov_base);
    while (left > 0) {
      const uint64_t chunk = off / chunk_bytes_;
      const uint64_t n = std::min(left, (chunk + 1) * chunk_bytes_ - off);
      fn(Piece{&r, chunk, off, n, addr});
      off += n;
      addr += n;
      left -= n;
    }
  }
}

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_RDMA_REGISTRATION_H_
