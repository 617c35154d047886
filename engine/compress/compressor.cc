#include "engine/compress/compressor.h"

#include <zstd.h>

#include "absl/strings/str_format.h"

namespace ramferry::engine {
namespace {

size_t TotalBytes(absl::Span<const iovec> runs) {
  size_t n = 0;
  for (const iovec& r : runs) n += r.iov_len;
  return n;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PacketCompressor>> PacketCompressor::Create(
    int level) {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  if (c == nullptr) return absl::ResourceExhaustedError("ZSTD_createCCtx");
  // A window no larger than a payload: the destination refuses frames
  // that need more (see PacketDecompressor), and no frame spans packets.
  ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, 22);
  ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 0);
  return std::unique_ptr<PacketCompressor>(new PacketCompressor(c));
}

PacketCompressor::~PacketCompressor() { ZSTD_freeCCtx(cctx_); }

size_t PacketCompressor::Compress(absl::Span<const iovec> runs,
                                  absl::Span<uint8_t> out) {
  const size_t total = TotalBytes(runs);
  if (total == 0 || total > kMaxCompressedPayload) return 0;
  ZSTD_CCtx_reset(cctx_, ZSTD_reset_session_only);
  // The frame header then states the exact size, which the destination
  // checks before it expands anything.
  ZSTD_CCtx_setPledgedSrcSize(cctx_, total);
  // Room for one byte less than the input: a frame that does not fit did
  // not save anything.
  ZSTD_outBuffer o{out.data(), std::min(out.size(), total - 1), 0};
  for (size_t i = 0; i < runs.size(); ++i) {
    ZSTD_inBuffer in{runs[i].iov_base, runs[i].iov_len, 0};
    const ZSTD_EndDirective end =
        i + 1 == runs.size() ? ZSTD_e_end : ZSTD_e_continue;
    while (true) {
      const size_t left = ZSTD_compressStream2(cctx_, &o, &in, end);
      if (ZSTD_isError(left)) return 0;
      if (end == ZSTD_e_end ? left == 0 : in.pos == in.size) break;
      if (o.pos == o.size) return 0;  // out of room: not worth it
    }
  }
  return o.pos;
}

absl::StatusOr<std::unique_ptr<PacketDecompressor>>
PacketDecompressor::Create() {
  ZSTD_DCtx* d = ZSTD_createDCtx();
  if (d == nullptr) return absl::ResourceExhaustedError("ZSTD_createDCtx");
  // A peer's frame may not make this end allocate a window larger than a
  // payload.
  ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, 22);
  return std::unique_ptr<PacketDecompressor>(new PacketDecompressor(d));
}

PacketDecompressor::~PacketDecompressor() { ZSTD_freeDCtx(dctx_); }

absl::Status PacketDecompressor::Decompress(absl::Span<const uint8_t> in,
                                            absl::Span<const iovec> runs) {
  const size_t total = TotalBytes(runs);
  const unsigned long long declared =
      ZSTD_getFrameContentSize(in.data(), in.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR ||
      declared == ZSTD_CONTENTSIZE_UNKNOWN || declared != total) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "compressed payload of %d bytes is not a frame of the %d bytes its "
        "pages hold",
        in.size(), total));
  }
  ZSTD_DCtx_reset(dctx_, ZSTD_reset_session_only);
  ZSTD_inBuffer src{in.data(), in.size(), 0};
  size_t left = 1;
  for (const iovec& run : runs) {
    ZSTD_outBuffer dst{run.iov_base, run.iov_len, 0};
    while (dst.pos < dst.size) {
      const size_t before_in = src.pos, before_out = dst.pos;
      left = ZSTD_decompressStream(dctx_, &dst, &src);
      if (ZSTD_isError(left)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("compressed payload does not decompress: %s",
                            ZSTD_getErrorName(left)));
      }
      if (left == 0 && dst.pos < dst.size) break;  // frame ended early
      if (src.pos == before_in && dst.pos == before_out) break;  // starved
    }
    if (dst.pos < dst.size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "compressed payload of %d bytes ends before filling the %d bytes "
          "its pages hold",
          in.size(), total));
    }
  }
  // Every page is full: the frame must end here, with no byte after it.
  if (left != 0) {
    uint8_t extra;
    ZSTD_outBuffer none{&extra, 1, 0};
    left = ZSTD_decompressStream(dctx_, &none, &src);
    if (ZSTD_isError(left) || left != 0 || none.pos != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "compressed payload expands past the %d bytes its pages hold",
          total));
    }
  }
  if (src.pos != src.size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "compressed payload has %d bytes after its frame", src.size - src.pos));
  }
  return absl::OkStatus();
}

}  // namespace ramferry::engine
