#include "tools/common/channel_flags.h"

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/status_util.h"
#include "ramferry/options.h"
#include "ramferry/transport.h"
#include "tools/common/cli.h"
#include "tools/common/enum_flag.h"

// The library's names for these, refused up front in its words.
namespace ramferry {
RAMFERRY_ENUM_FLAG_VIA(CompletionPolicy, ParseCompletionPolicy,
                       CompletionPolicyName);
RAMFERRY_ENUM_FLAG_VIA(Compression, ParseCompression, CompressionName);
RAMFERRY_ENUM_FLAG_VIA(Delta, ParseDelta, DeltaName);
}  // namespace ramferry

ABSL_FLAG(uint32_t, channels, 2, "parallel data channels");
ABSL_FLAG(uint32_t, packet_pages, 128, "pages per packet (4 KiB each)");
ABSL_FLAG(uint32_t, header_slots, 1024, "zero-copy header slots per channel");
ABSL_FLAG(ramferry::CompletionPolicy, completion,
          ramferry::CompletionPolicy::kWrap,
          "zero-copy completion policy: wrap | slot | each");
ABSL_FLAG(bool, registered_buffers, false,
          "uring-zc: send pages from io_uring registered buffers");
ABSL_FLAG(bool, zero_pages, true,
          "send all-zero pages as offsets alone and, in the first round, "
          "never-touched memory as ranges, instead of their bytes (either "
          "end can turn it off; off moves every byte)");
ABSL_FLAG(ramferry::Compression, compress, ramferry::Compression::kOff,
          "source: compress packet payloads with zstd: off | on | auto "
          "(each channel compresses while the link, as its sends measure "
          "it, is slower than the compressor on the data it sends); a "
          "compressed packet is built in a staging buffer, so it is not "
          "zero-copy. Not on rdma");
ABSL_FLAG(int, compress_level, 1,
          "zstd level for --compress (negative: faster, larger)");
ABSL_FLAG(
    ramferry::Delta, delta, ramferry::Delta::kOff,
    "source: send pages re-sent after the first round as deltas "
    "(XOR runs) against the copy last sent, where the delta is under "
    "half a page: off | on | auto (each channel encodes while that "
    "costs it next to no speed: on a link slower than the encoding, off on "
    "one as fast). The copies are kept in --delta-cache. Not on rdma "
    "(auto is off there)");
ABSL_FLAG(std::string, delta_cache, "256MiB",
          "--delta: the most memory the source's copies of sent pages take "
          "(the least recently sent evicted first; reserved, committed as "
          "pages are cached)");
ABSL_FLAG(bool, uring_fallback, false,
          "uring-zc on a kernel without it: use tcp-zerocopy (with a "
          "warning) instead of failing");

namespace ramferry::cli {

absl::Status ApplyChannelFlags(SessionOptions* options) {
  options->completion = absl::GetFlag(FLAGS_completion);
  options->channels = absl::GetFlag(FLAGS_channels);
  options->packet_pages = absl::GetFlag(FLAGS_packet_pages);
  options->header_slots = absl::GetFlag(FLAGS_header_slots);
  options->registered_buffers = absl::GetFlag(FLAGS_registered_buffers);
  options->fallback_to_tcp_zerocopy = absl::GetFlag(FLAGS_uring_fallback);
  options->zero_pages = absl::GetFlag(FLAGS_zero_pages);
  options->compression = absl::GetFlag(FLAGS_compress);
  options->compression_level = absl::GetFlag(FLAGS_compress_level);
  options->delta = absl::GetFlag(FLAGS_delta);
  absl::StatusOr<uint64_t> cache = ParseBytes(absl::GetFlag(FLAGS_delta_cache));
  if (!cache.ok()) return base::Annotate(cache.status(), "--delta-cache");
  options->delta_cache_bytes = *cache;
  return absl::OkStatus();
}

bool AbslParseFlag(absl::string_view text, TransportFlag* out,
                   std::string* error) {
  if (text == "auto") {
    out->kind = std::nullopt;
    return true;
  }
  absl::StatusOr<TransportKind> kind = ParseTransportKind(text);
  if (!kind.ok()) {
    // ParseTransportKind's refusal ends with the kinds; auto is one more.
    *error = absl::StrCat(kind.status().message(), ", auto");
    return false;
  }
  out->kind = *kind;
  return true;
}

std::string AbslUnparseFlag(const TransportFlag& flag) {
  return flag.kind ? std::string(TransportKindName(*flag.kind)) : "auto";
}

absl::StatusOr<std::string> ChooseTransportFor(const std::string& host,
                                               const char* program,
                                               SessionOptions* options) {
  RAMFERRY_ASSIGN_OR_RETURN(TransportChoice choice, ChooseTransport(host));
  options->transport = choice.kind;
  std::fprintf(stderr, "%s: --transport=auto chose %s\n", program,
               choice.reason.c_str());
  return choice.reason;
}

}  // namespace ramferry::cli
