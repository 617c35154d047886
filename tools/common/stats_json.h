// Session counters as JSON, the same way in every binary.
#ifndef RAMFERRY_TOOLS_COMMON_STATS_JSON_H_
#define RAMFERRY_TOOLS_COMMON_STATS_JSON_H_

#include "ramferry/stats.h"
#include "tools/common/cli.h"

namespace ramferry::cli {

// Writes the counters of one channel (or a total) as the current value.
void WriteChannelStats(JsonWriter& w, const ChannelStats& c);
// An array of per-channel objects.
void WriteChannelArray(JsonWriter& w, const SessionStats& s);
// The channels the session went on without, as an array of
// {channel, round, reason} (SessionOptions::survive_channel_loss).
void WriteChannelLosses(JsonWriter& w, const SessionStats& s);

}  // namespace ramferry::cli

#endif  // RAMFERRY_TOOLS_COMMON_STATS_JSON_H_
