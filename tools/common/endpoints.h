// Addresses on the command line: --connect=HOST:PORT, or a comma list of
// them whose channels spread over several links (SessionOptions::
// channel_endpoints), and ramferry-bench's --host=A,B.
#ifndef RAMFERRY_TOOLS_COMMON_ENDPOINTS_H_
#define RAMFERRY_TOOLS_COMMON_ENDPOINTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ramferry/options.h"

namespace ramferry::cli {

// "HOST:PORT"; an IPv6 host in brackets ("[::1]:7070"). Port 0 (a
// listener's: any free port) is allowed.
absl::StatusOr<Endpoint> ParseHostPort(absl::string_view text);

// "A:P" or "A:P,B:P,...": each item HOST:PORT, the port not 0. The error
// names the bad item, by position and text.
absl::StatusOr<std::vector<Endpoint>> ParseEndpointList(absl::string_view text);

// "A" or "A,B,...": hosts without ports, none empty; the error names the
// bad item.
absl::StatusOr<std::vector<std::string>> ParseHostList(absl::string_view text);

// The first endpoint is the session's host:port (its control connection
// and, alone, every channel); with more than one, the data channels
// spread over all of them (channel_endpoints), the first included.
void ApplyEndpoints(absl::Span<const Endpoint> endpoints,
                    SessionOptions* options);

}  // namespace ramferry::cli

#endif  // RAMFERRY_TOOLS_COMMON_ENDPOINTS_H_
