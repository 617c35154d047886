#include "tools/common/stats_json.h"

#include <algorithm>
#include <iterator>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ramferry::cli {

namespace {

// A time counter holds nanoseconds and says so in its name, which
// CounterKey() replaces.
constexpr bool NamedForItsUnit(const ChannelCounter& c) {
  return std::string_view(c.name).ends_with("_ns") ==
         (c.json != CounterJson::kCount);
}
static_assert(std::all_of(std::begin(kChannelCounters),
                          std::end(kChannelCounters), NamedForItsUnit));

}  // namespace

std::string CounterKey(const ChannelCounter& counter) {
  absl::string_view name = counter.name;
  switch (counter.json) {
    case CounterJson::kCount:
      return std::string(name);
    case CounterJson::kSeconds:
      return absl::StrCat(absl::StripSuffix(name, "_ns"), "_s");
    case CounterJson::kMicros:
      return absl::StrCat(absl::StripSuffix(name, "_ns"), "_us");
  }
  return std::string(name);
}

void WriteCounterFields(JsonWriter& w, const ChannelStats& c,
                        absl::Span<const CounterRename> renames) {
  for (const ChannelCounter& counter : kChannelCounters) {
    const auto renamed = std::find_if(
        renames.begin(), renames.end(),
        [&](const CounterRename& r) { return r.field == counter.field; });
    w.Key(renamed != renames.end() ? std::string(renamed->key)
                                   : CounterKey(counter));
    const uint64_t v = c.*counter.field;
    switch (counter.json) {
      case CounterJson::kCount:
        w.Uint(v);
        break;
      case CounterJson::kSeconds:
        w.Number(v * 1e-9);
        break;
      case CounterJson::kMicros:
        w.Number(v * 1e-3);
        break;
    }
  }
}

void WriteChannelStats(JsonWriter& w, const ChannelStats& c) {
  w.BeginObject().Key("channel").Uint(c.channel);
  WriteCounterFields(w, c);
  w.EndObject();
}

void WriteChannelArray(JsonWriter& w, const SessionStats& s) {
  w.BeginArray();
  for (const ChannelStats& c : s.channels) WriteChannelStats(w, c);
  w.EndArray();
}

void WriteChannelLosses(JsonWriter& w, const SessionStats& s) {
  w.BeginArray();
  for (const ChannelLoss& l : s.channels_lost) {
    w.BeginObject()
        .Key("channel")
        .Uint(l.channel)
        .Key("round")
        .Uint(l.round)
        .Key("reason")
        .String(l.reason)
        .EndObject();
  }
  w.EndArray();
}

}  // namespace ramferry::cli
