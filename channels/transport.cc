#include "channels/transport.h"

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "base/named_enum.h"
#include "channels/transport_family.h"

namespace ramferry {
namespace {

constexpr base::EnumName<CompletionPolicy> kPolicyNames[] = {
    {CompletionPolicy::kWrap, "wrap"},
    {CompletionPolicy::kSlot, "slot"},
    {CompletionPolicy::kEach, "each"},
};

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
  return base::UnknownName("transport", name, absl::StrJoin(names, ", "));
}
bool IsZeroCopy(TransportKind kind) {
  return (channels::StaticCapabilities(kind) & channels::kCapZeroCopy) != 0;
}

absl::string_view CompletionPolicyName(CompletionPolicy policy) {
  return base::NameOf(kPolicyNames, policy);
}
absl::StatusOr<CompletionPolicy> ParseCompletionPolicy(absl::string_view name) {
  return base::ParseName(kPolicyNames, "completion policy", name);
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
