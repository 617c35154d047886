// Packet payload compression (zstd): the source's channel thread squeezes
// a packet's pages into a staging buffer; the destination's expands the
// frame straight into the pages' places, checking every length.
#ifndef RAMFERRY_ENGINE_COMPRESS_COMPRESSOR_H_
#define RAMFERRY_ENGINE_COMPRESS_COMPRESSOR_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace ramferry::engine {

// The largest payload a compressed packet may carry, before compression:
// it bounds the staging buffer on both ends and what one frame may
// expand to (1024 pages of 4 KiB).
inline constexpr size_t kMaxCompressedPayload = 4u << 20;

class PacketCompressor {
 public:
  // `level`: zstd's (1 is its fast end; negative levels are faster still).
  static absl::StatusOr<std::unique_ptr<PacketCompressor>> Create(int level);
  ~PacketCompressor();
  PacketCompressor(const PacketCompressor&) = delete;
  PacketCompressor& operator=(const PacketCompressor&) = delete;

  // Compresses the bytes of `runs` (at most kMaxCompressedPayload) into
  // `out` as one frame and returns its size, or 0 when the frame would not
  // be smaller than the input (the packet then goes as it is).
  size_t Compress(absl::Span<const iovec> runs, absl::Span<uint8_t> out);

 private:
  explicit PacketCompressor(ZSTD_CCtx_s* cctx) : cctx_(cctx) {}
  ZSTD_CCtx_s* cctx_;
};

class PacketDecompressor {
 public:
  static absl::StatusOr<std::unique_ptr<PacketDecompressor>> Create();
  ~PacketDecompressor();
  PacketDecompressor(const PacketDecompressor&) = delete;
  PacketDecompressor& operator=(const PacketDecompressor&) = delete;

  // Expands the frame `in` into `runs`. OK only when the frame declares
  // exactly the runs' size, fills every byte of them, ends, and nothing
  // follows it; a lying length, a frame that wants more room (a
  // decompression bomb) or a corrupt one is INVALID_ARGUMENT. The runs
  // may be partly written on error; nothing outside them ever is.
  absl::Status Decompress(absl::Span<const uint8_t> in,
                          absl::Span<const iovec> runs);

 private:
  explicit PacketDecompressor(ZSTD_DCtx_s* dctx) : dctx_(dctx) {}
  ZSTD_DCtx_s* dctx_;
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_COMPRESS_COMPRESSOR_H_
