#include "tools/common/link_summary.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/common/cli.h"

namespace ramferry::cli {

std::vector<LinkSummary> SummarizeLinks(const SessionStats& stats,
                                        double seconds) {
  std::vector<LinkSummary> links;
  for (const ChannelStats& c : stats.channels) {
    if (c.endpoint.empty()) continue;
    auto it = std::find_if(links.begin(), links.end(), [&](const auto& l) {
      return l.endpoint == c.endpoint;
    });
    if (it == links.end()) {
      links.push_back({.endpoint = c.endpoint});
      it = links.end() - 1;
    }
    it->channels.push_back(c.channel);
    it->channels_lost += c.lost != 0;
    it->payload_bytes += c.payload_bytes;
    it->bytes += c.payload_bytes + c.header_bytes;
  }
  for (LinkSummary& l : links) {
    l.gb_per_s = seconds > 0 ? l.bytes / seconds / 1e9 : 0;
  }
  return links;
}

Json LinksJson(const std::vector<LinkSummary>& links) {
  Json a = Json::array();
  for (const LinkSummary& l : links) {
    a.push_back({{"endpoint", l.endpoint},
                 {"channels", l.channels},
                 {"channels_lost", l.channels_lost},
                 {"payload_bytes", l.payload_bytes},
                 {"bytes", l.bytes},
                 {"gb_per_s", l.gb_per_s}});
  }
  return a;
}

std::string LinksTable(const std::vector<LinkSummary>& links) {
  std::string t;
  for (const LinkSummary& l : links) {
    absl::StrAppendFormat(
        &t, "  link             %s: channels %s%s, %s, %s\n", l.endpoint,
        absl::StrJoin(l.channels, ","),
        l.channels_lost ? absl::StrFormat(" (%d lost)", l.channels_lost) : "",
        FormatBytes(l.bytes), FormatRate(l.gb_per_s * 1e9));
  }
  return t;
}

}  // namespace ramferry::cli
