#include "ramferry/stats.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ramferry {

ChannelStats SessionStats::Total() const {
  ChannelStats t;
  for (const ChannelStats& c : channels) {
    for (const ChannelCounter& k : kChannelCounters) {
      uint64_t& total = t.*k.field;
      total = k.merge == CounterMerge::kSum ? total + c.*k.field
                                            : std::max(total, c.*k.field);
    }
  }
  return t;
}

std::string DescribeChannelLosses(const std::vector<ChannelLoss>& losses) {
  std::string out;
  for (const ChannelLoss& l : losses) {
    absl::StrAppendFormat(&out, "%schannel %d in round %d (%s)",
                          out.empty() ? "" : "; ", l.channel, l.round,
                          l.reason);
  }
  return out;
}

}  // namespace ramferry
