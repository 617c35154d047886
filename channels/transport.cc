#include "channels/transport.h"

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "channels/transport_family.h"

namespace ramferry {
namespace {

constexpr std::pair<CompletionPolicy, absl::string_view> kPolicyNames[] = {
    {CompletionPolicy::kWrap, "wrap"},
    {CompletionPolicy::kSlot, "slot"},
    {CompletionPolicy::kEach, "each"},
};

template <typename Enum, size_t N>
absl::string_view NameOf(const std::pair<Enum, absl::string_view> (&table)[N],
                         Enum value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "unknown";
}

absl::Status UnknownName(absl::string_view what, absl::string_view name,
                         absl::Span<const absl::string_view> choices) {
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown %s '%s'; choose one of: %s", what, name,
                      absl::StrJoin(choices, ", ")));
}

template <typename Enum, size_t N>
absl::StatusOr<Enum> Parse(const std::pair<Enum, absl::string_view> (&table)[N],
                           absl::string_view what, absl::string_view name) {
  std::vector<absl::string_view> names;
  for (const auto& [v, n] : table) {
    if (n == name) return v;
    names.push_back(n);
  }
  return UnknownName(what, name, names);
}

}  // namespace

absl::string_view TransportKindName(TransportKind kind) {
  const channels::TransportFamily* f = channels::FindTransportFamily(kind);
  return f == nullptr ? "unknown" : f->name;
}
absl::StatusOr<TransportKind> ParseTransportKind(absl::string_view name) {
  std::vector<absl::string_view> names;
  for (const channels::TransportFamily& f : channels::TransportFamilies()) {
    if (f.name == name) return f.kind;
    names.push_back(f.name);
  }
  return UnknownName("transport", name, names);
}
bool IsZeroCopy(TransportKind kind) {
  return (channels::StaticCapabilities(kind) & channels::kCapZeroCopy) != 0;
}

absl::string_view CompletionPolicyName(CompletionPolicy policy) {
  return NameOf(kPolicyNames, policy);
}
absl::StatusOr<CompletionPolicy> ParseCompletionPolicy(absl::string_view name) {
  return Parse(kPolicyNames, "completion policy", name);
}

namespace channels {

void TransportStats::ExportTo(ChannelStats* out) const {
#define RAMFERRY_EXPORT_COUNTER(field, merge, json, doc) \
  out->field = field.get();  // NOLINT(bugprone-macro-parentheses): names
  RAMFERRY_TRANSPORT_COUNTERS(RAMFERRY_EXPORT_COUNTER)
  RAMFERRY_RDMA_COUNTERS(RAMFERRY_EXPORT_COUNTER)
#undef RAMFERRY_EXPORT_COUNTER
}

}  // namespace channels
}  // namespace ramferry
