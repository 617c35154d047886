#include "channels/rdma/registration.h"

#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/zero_page.h"

namespace ramferry::channels {
namespace {

// Cuts `refs` into runs of at most `most`.
std::vector<std::vector<proto::ChunkRef>> Batches(
    const std::vector<proto::ChunkRef>& refs, size_t most) {
  std::vector<std::vector<proto::ChunkRef>> out;
  for (size_t i = 0; i < refs.size(); i += most) {
    out.emplace_back(refs.begin() + i,
                     refs.begin() + std::min(refs.size(), i + most));
  }
  return out;
}

}  // namespace

uint64_t ChunkRegistry::AddRegion(uint32_t id, uint8_t* base, uint64_t length) {
  RdmaRegion& r = regions_[id];
  r.base = base;
  r.length = length;
  const uint64_t chunks = (length + chunk_bytes_ - 1) / chunk_bytes_;
  r.remote.assign(chunks, {});
  return chunks;
}

absl::StatusOr<absl::Span<uint8_t>> ChunkRegistry::ChunkSpan(
    const proto::ChunkRef& ref) const {
  auto it = regions_.find(ref.region);
  if (it == regions_.end() || ref.chunk >= it->second.chunks()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RDMA control names chunk %d of region %d, which does not exist",
        ref.chunk, ref.region));
  }
  const uint64_t off = uint64_t{ref.chunk} * chunk_bytes_;
  return absl::MakeSpan(it->second.base + off,
                        std::min(chunk_bytes_, it->second.length - off));
}

bool ChunkRegistry::ChunkIsZero(const RdmaRegion& r, uint64_t chunk) const {
  const uint64_t off = chunk * chunk_bytes_;
  const uint64_t len = std::min(chunk_bytes_, r.length - off);
  return base::IsAllZero(r.base + off, len);
}

RegistrationPlan ChunkRegistry::Plan(absl::Span<const PageRuns> packets,
                                     size_t register_batch) {
  std::vector<proto::ChunkRef> zero, unknown;
  absl::flat_hash_set<uint64_t> decided;  // (region, chunk), this batch
  for (const PageRuns& p : packets) {
    ForEachPiece(p, [&](const Piece& piece) {
      RemoteChunk& rc = piece.region->remote[piece.chunk];
      if (rc.state == RemoteChunk::kKnown ||
          !decided.insert((uint64_t{p.region} << 32) | piece.chunk).second) {
        return;
      }
      // Unknown, or compressed before and perhaps holding data now.
      const proto::ChunkRef ref{p.region, static_cast<uint32_t>(piece.chunk)};
      if (ChunkIsZero(*piece.region, piece.chunk)) {
        rc.state = RemoteChunk::kZero;
        zero.push_back(ref);
      } else {
        rc.state = RemoteChunk::kUnknown;
        unknown.push_back(ref);
      }
    });
  }
  return {Batches(zero, proto::kMaxRdmaControlEntries),
          Batches(unknown, std::max<size_t>(register_batch, 1))};
}

absl::Status ChunkRegistry::ApplyKeys(absl::Span<const proto::ChunkRef> batch,
                                      absl::Span<const proto::ChunkKey> keys) {
  if (keys.size() != batch.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "REGISTER_RESULT carries %d keys for a request of %d chunks",
        keys.size(), batch.size()));
  }
  for (size_t k = 0; k < keys.size(); ++k) {
    RemoteChunk& rc = regions_[batch[k].region].remote[batch[k].chunk];
    rc.state = RemoteChunk::kKnown;
    rc.rkey = keys[k].rkey;
    rc.addr = keys[k].addr;
  }
  return absl::OkStatus();
}

absl::Status ChunkRegistry::ApplyRegionKeys(
    absl::Span<const proto::RegionKey> keys) {
  for (const proto::RegionKey& k : keys) {
    auto it = regions_.find(k.region);
    if (it == regions_.end() || it->second.length != k.length) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "destination sent keys for region %d of %d bytes, which "
          "this side does not have",
          k.region, k.length));
    }
    it->second.remote_rkey = k.rkey;
    it->second.remote_addr = k.addr;
  }
  return absl::OkStatus();
}

absl::Status ChunkRegistry::MarkCompressed(
    absl::Span<const proto::ChunkRef> chunks) {
  for (const proto::ChunkRef& ref : chunks) {
    RAMFERRY_RETURN_IF_ERROR(ChunkSpan(ref).status());
    SetZeroChunk(ref, true);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<proto::ChunkKey>>
ChunkRegistry::AnswerRegisterRequest(absl::Span<const proto::ChunkRef> chunks,
                                     RegisterChunk register_chunk) {
  std::vector<proto::ChunkKey> keys;
  for (const proto::ChunkRef& ref : chunks) {
    RAMFERRY_ASSIGN_OR_RETURN(absl::Span<uint8_t> span, ChunkSpan(ref));
    SetZeroChunk(ref, false);
    RAMFERRY_ASSIGN_OR_RETURN(uint32_t rkey, register_chunk(ref, span));
    keys.push_back({rkey, reinterpret_cast<uint64_t>(span.data())});
  }
  return keys;
}

void ChunkRegistry::SetZeroChunk(const proto::ChunkRef& ref, bool zero) {
  RdmaRegion& r = regions_[ref.region];
  if (r.zero.empty()) r.zero.resize(r.chunks());
  if (r.zero[ref.chunk] != zero) zero_chunks_ += zero ? 1 : -1;
  r.zero[ref.chunk] = zero;
}

void ChunkRegistry::ZeroFillCompressed(absl::Span<const iovec> dst) {
  for (const iovec& v : dst) {
    auto* p = static_cast<uint8_t*>(v.iov_base);
    for (auto& [id, r] : regions_) {
      if (r.zero.empty() || p < r.base || p + v.iov_len > r.base + r.length) {
        continue;
      }
      uint64_t off = static_cast<uint64_t>(p - r.base);
      const uint64_t end = off + v.iov_len;
      while (off < end) {
        const uint64_t chunk = off / chunk_bytes_;
        const uint64_t n = std::min(end, (chunk + 1) * chunk_bytes_) - off;
        if (r.zero[chunk]) std::memset(r.base + off, 0, n);
        off += n;
      }
      break;
    }
  }
}

}  // namespace ramferry::channels
