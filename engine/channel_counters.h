// A data channel's engine counters, made from the table that names them
// (ramferry/channel_counters.h), as channels::TransportStats is made from
// the transport's: one base::Counter per row, and their export. Written by
// the channel's own thread, read by any.
//
// Each end counts the rows it has; the others stay 0. The rows an end
// computes elsewhere (the ring's, the latency quantiles, `lost`) it sets
// after ExportTo, which copies every row.
#ifndef RAMFERRY_ENGINE_CHANNEL_COUNTERS_H_
#define RAMFERRY_ENGINE_CHANNEL_COUNTERS_H_

#include "base/counters.h"
#include "ramferry/channel_counters.h"
#include "ramferry/stats.h"

namespace ramferry::engine {

struct ChannelCounters {
#define RAMFERRY_ENGINE_FIELD(field, merge, json, doc) base::Counter field;
  RAMFERRY_ENGINE_COUNTERS(RAMFERRY_ENGINE_FIELD)
#undef RAMFERRY_ENGINE_FIELD

  void ExportTo(ChannelStats* out) const {
#define RAMFERRY_ENGINE_EXPORT(field, merge, json, doc) \
  out->field = field.get();  // NOLINT(bugprone-macro-parentheses): names
    RAMFERRY_ENGINE_COUNTERS(RAMFERRY_ENGINE_EXPORT)
#undef RAMFERRY_ENGINE_EXPORT
  }
};

}  // namespace ramferry::engine

#endif  // RAMFERRY_ENGINE_CHANNEL_COUNTERS_H_
