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

template <typename Enum, size_t N>
absl::StatusOr<Enum> Parse(const std::pair<Enum, absl::string_view> (&table)[N],
                           absl::string_view what, absl::string_view name) {
  for (const auto& [v, n] : table) {
    if (n == name) return v;
  }
  std::vector<absl::string_view> names;
  for (const auto& entry : table) names.push_back(entry.second);
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown %s '%s'; choose one of: %s", what, name,
                      absl::StrJoin(names, ", ")));
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
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown transport '%s'; choose one of: %s", name,
                      absl::StrJoin(names, ", ")));
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
  out->send_calls = send_calls.get();
  out->submit_calls = submit_calls.get();
  out->short_sends = short_sends.get();
  out->zc_sends = zc_sends.get();
  out->zc_completions = zc_completions.get();
  out->zc_copied = zc_copied.get();
  out->zc_notifications = zc_notifications.get();
  out->enobufs_retries = enobufs_retries.get();
  out->flushes = flushes.get();
  out->completion_wait_ns = completion_wait_ns.get();
  out->max_slots_in_flight = max_slots_in_flight.get();
  out->recv_calls = recv_calls.get();
  out->rdma_posts = rdma_posts.get();
  out->rdma_wrs = rdma_wrs.get();
  out->rdma_outstanding_max = rdma_outstanding_max.get();
  out->rdma_sq_full_hits = rdma_sq_full_hits.get();
  out->rdma_drains_to_zero = rdma_drains_to_zero.get();
  out->inline_sends = inline_sends.get();
  out->inline_max_bytes = inline_max_bytes.get();
  out->inline_granted = inline_granted.get();
  out->register_round_trips = register_round_trips.get();
  out->register_batch_max = register_batch_max.get();
  out->chunks_registered = chunks_registered.get();
  out->chunks_compressed = chunks_compressed.get();
}

}  // namespace channels
}  // namespace ramferry
