// Per-link figures of a session whose channels went to several endpoints
// (SessionOptions::channel_endpoints): which channels each link carried,
// their bytes, and the rate over the transfer.
#ifndef RAMFERRY_TOOLS_COMMON_LINK_SUMMARY_H_
#define RAMFERRY_TOOLS_COMMON_LINK_SUMMARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ramferry/stats.h"
#include "tools/common/json.h"

namespace ramferry::cli {

struct LinkSummary {
  std::string endpoint;            // ChannelStats::endpoint
  std::vector<uint32_t> channels;  // the channels that went there
  uint32_t channels_lost = 0;      // of those, lost (survive_channel_loss)
  uint64_t payload_bytes = 0;
  uint64_t bytes = 0;   // payload and packet headers
  double gb_per_s = 0;  // bytes over the transfer's seconds
};

// One summary per endpoint, in the order of the channels that first name
// them; empty when no channel has an endpoint. `seconds`: the transfer's
// duration (0: rates are 0).
std::vector<LinkSummary> SummarizeLinks(const SessionStats& stats,
                                        double seconds);

// An array of {endpoint, channels, channels_lost, payload_bytes, bytes,
// gb_per_s}.
Json LinksJson(const std::vector<LinkSummary>& links);

// "  link  10.77.0.2:7070: channels 0,2, 1.2GiB, 112.5MiB/s\n" per link,
// indented as the migrate report's lines; "" for none.
std::string LinksTable(const std::vector<LinkSummary>& links);

}  // namespace ramferry::cli

#endif  // RAMFERRY_TOOLS_COMMON_LINK_SUMMARY_H_
