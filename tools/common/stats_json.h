// Session counters as JSON, the same way in every binary.
#ifndef RAMFERRY_TOOLS_COMMON_STATS_JSON_H_
#define RAMFERRY_TOOLS_COMMON_STATS_JSON_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ramferry/stats.h"
#include "tools/common/cli.h"

namespace ramferry::cli {

// A counter's JSON key: its name, with a time's _ns replaced by _s or
// _us (CounterJson).
std::string CounterKey(const ChannelCounter& counter);

// A key a JSON document gives a counter instead of CounterKey().
struct CounterRename {
  uint64_t ChannelStats::*field;
  absl::string_view key;
};

// Writes every counter of `c` as keys of the object being written, in
// the order of RAMFERRY_CHANNEL_COUNTERS; a time in its JSON unit.
void WriteCounterFields(JsonWriter& w, const ChannelStats& c,
                        absl::Span<const CounterRename> renames = {});
// Writes the counters of one channel (or a total) as the current value:
// an object of its channel number and WriteCounterFields().
void WriteChannelStats(JsonWriter& w, const ChannelStats& c);
// An array of per-channel objects.
void WriteChannelArray(JsonWriter& w, const SessionStats& s);
// The channels the session went on without, as an array of
// {channel, round, reason} (SessionOptions::survive_channel_loss).
void WriteChannelLosses(JsonWriter& w, const SessionStats& s);

}  // namespace ramferry::cli

#endif  // RAMFERRY_TOOLS_COMMON_STATS_JSON_H_
