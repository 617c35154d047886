#include "tools/common/endpoints.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace ramferry::cli {

absl::StatusOr<Endpoint> ParseHostPort(absl::string_view text) {
  const size_t colon = text.rfind(':');
  uint32_t port = 0;
  absl::string_view host =
      colon == absl::string_view::npos ? text : text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [::1]
  }
  if (colon == absl::string_view::npos || host.empty() ||
      !absl::SimpleAtoi(text.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'%s' is not HOST:PORT (an IPv6 host in brackets, [::1]:7070)", text));
  }
  return Endpoint{std::string(host), static_cast<uint16_t>(port)};
}

absl::StatusOr<std::vector<Endpoint>> ParseEndpointList(
    absl::string_view text) {
  std::vector<Endpoint> out;
  const std::vector<absl::string_view> items = absl::StrSplit(text, ',');
  for (size_t i = 0; i < items.size(); ++i) {
    const absl::string_view item = absl::StripAsciiWhitespace(items[i]);
    absl::StatusOr<Endpoint> e = ParseHostPort(item);
    if (e.ok() && e->port == 0) {
      e = absl::InvalidArgumentError(absl::StrFormat(
          "'%s' has port 0: a source dials a port in [1, 65535]", item));
    }
    if (!e.ok()) {
      if (items.size() == 1) return e.status();
      return absl::InvalidArgumentError(absl::StrFormat(
          "item %d of '%s': %s", i + 1, text, e.status().message()));
    }
    out.push_back(*std::move(e));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ParseHostList(absl::string_view text) {
  std::vector<std::string> out;
  const std::vector<absl::string_view> items = absl::StrSplit(text, ',');
  for (size_t i = 0; i < items.size(); ++i) {
    const absl::string_view host = absl::StripAsciiWhitespace(items[i]);
    if (host.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "item %d of '%s' is empty: want HOST or HOST,HOST", i + 1, text));
    }
    out.emplace_back(host);
  }
  return out;
}

void ApplyEndpoints(absl::Span<const Endpoint> endpoints,
                    SessionOptions* options) {
  if (endpoints.empty()) return;
  options->host = endpoints[0].host;
  options->port = endpoints[0].port;
  options->channel_endpoints.clear();
  if (endpoints.size() > 1) {
    options->channel_endpoints.assign(endpoints.begin(), endpoints.end());
  }
}

}  // namespace ramferry::cli
