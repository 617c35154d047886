#include "tools/common/channel_flags.h"

#include <cstdint>
#include <cstdio>

#include "absl/flags/flag.h"
#include "ramferry/transport.h"

ABSL_FLAG(uint32_t, channels, 2, "parallel data channels");
ABSL_FLAG(uint32_t, packet_pages, 128, "pages per packet (4 KiB each)");
ABSL_FLAG(uint32_t, header_slots, 1024, "zero-copy header slots per channel");
ABSL_FLAG(std::string, completion, "wrap",
          "zero-copy completion policy: wrap | slot | each");
ABSL_FLAG(bool, registered_buffers, false,
          "uring-zc: send pages from io_uring registered buffers");
ABSL_FLAG(bool, uring_fallback, false,
          "uring-zc on a kernel without it: use tcp-zerocopy (with a "
          "warning) instead of failing");

namespace ramferry::cli {

absl::Status ApplyChannelFlags(SessionOptions* options) {
  absl::StatusOr<CompletionPolicy> policy =
      ParseCompletionPolicy(absl::GetFlag(FLAGS_completion));
  if (!policy.ok()) return policy.status();
  options->completion = *policy;
  options->channels = absl::GetFlag(FLAGS_channels);
  options->packet_pages = absl::GetFlag(FLAGS_packet_pages);
  options->header_slots = absl::GetFlag(FLAGS_header_slots);
  options->registered_buffers = absl::GetFlag(FLAGS_registered_buffers);
  options->fallback_to_tcp_zerocopy = absl::GetFlag(FLAGS_uring_fallback);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ChooseTransportFor(const std::string& host,
                                               const char* program,
                                               SessionOptions* options) {
  absl::StatusOr<TransportChoice> choice = ChooseTransport(host);
  if (!choice.ok()) return choice.status();
  options->transport = choice->kind;
  std::fprintf(stderr, "%s: --transport=auto chose %s\n", program,
               choice->reason.c_str());
  return choice->reason;
}

}  // namespace ramferry::cli
