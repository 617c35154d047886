// The channel flags both binaries take (--channels, --packet-pages,
// --header-slots, --completion, --registered-buffers, --uring-fallback),
// and --transport=auto's choice. Each binary keeps its own --transport
// flag: the kinds it offers differ.
#ifndef RAMFERRY_TOOLS_COMMON_CHANNEL_FLAGS_H_
#define RAMFERRY_TOOLS_COMMON_CHANNEL_FLAGS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ramferry/options.h"
#include "ramferry/transport.h"

namespace ramferry::cli {

// Sets the channel fields of `options` from the flags; an unknown
// --completion is an error.
absl::Status ApplyChannelFlags(SessionOptions* options);

// A --transport flag: a kind this build has, or "auto" (no kind yet:
// ChooseTransportFor picks one once the peer's address is known). An
// unknown name is refused as the command line is parsed, offering every
// kind and auto.
struct TransportFlag {
  std::optional<TransportKind> kind;  // std::nullopt: auto
};
bool AbslParseFlag(absl::string_view text, TransportFlag* out,
                   std::string* error);
std::string AbslUnparseFlag(const TransportFlag& flag);

// --transport=auto: sets options->transport to what ChooseTransport picks
// for `host`, prints the choice and its reason to stderr as `program`, and
// returns the reason.
absl::StatusOr<std::string> ChooseTransportFor(const std::string& host,
                                               const char* program,
                                               SessionOptions* options);

}  // namespace ramferry::cli

#endif  // RAMFERRY_TOOLS_COMMON_CHANNEL_FLAGS_H_
