// Verify: the destination's digests of every page, requested a window
// ahead, compared with this side's.
#include <algorithm>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "engine/sender_impl.h"

namespace ramferry {

namespace {
// Requests stay this many pieces ahead of the comparison, so the
// destination hashes while this side compares.
constexpr int kWindow = 4;
}  // namespace

absl::Status SenderImpl::StartVerify() {
  if (finished_) return absl::FailedPreconditionError("session is finished");
  if (sent_digests_ != nullptr || local_digests_ != nullptr) {
    return absl::OkStatus();  // nothing to read, or already started
  }
  // Pages sent since the memory froze have their digests already (taken
  // as they went); a page sent from here on is hashed twice, to the same
  // digest.
  RAMFERRY_ASSIGN_OR_RETURN(
      std::unique_ptr<engine::BackgroundDigests> d,
      engine::BackgroundDigests::Start(regions_, 0, frozen_digests_.get()));
  local_digests_ = std::move(d);
  return absl::OkStatus();
}

absl::StatusOr<VerifyReport> SenderImpl::Verify() {
  if (finished_) return absl::FailedPreconditionError("session is finished");
  if (failure_.failed()) return FinalStatus();
  if ((terms_.features & proto::kFeatureVerify) == 0) {
    return absl::UnimplementedError("destination cannot verify pages");
  }
  RAMFERRY_RETURN_IF_ERROR(AwaitStartedRounds());
  RAMFERRY_RETURN_IF_ERROR(StartVerify());
  // A later Verify hashes memory again: it may have changed since.
  std::unique_ptr<engine::BackgroundDigests> local_digests =
      std::move(local_digests_);
  bool hashed = sent_digests_ != nullptr;
  VerifyReport report;
  for (const Region& region : regions_) {
    RAMFERRY_RETURN_IF_ERROR(
        VerifyRegion(region, local_digests.get(), &hashed, &report));
  }
  return report;
}

absl::Status SenderImpl::VerifyRegion(const Region& region,
                                      engine::BackgroundDigests* local_digests,
                                      bool* hashed, VerifyReport* report) {
  const size_t index = static_cast<size_t>(&region - regions_.data());
  const uint64_t pages = region.page_count();
  uint64_t requested = 0;
  uint64_t compared = 0;
  int in_flight = 0;
  while (compared < pages) {
    RAMFERRY_RETURN_IF_ERROR(RequestDigests(region, &requested, &in_flight));
    const uint64_t count =
        std::min<uint64_t>(proto::kMaxVerifyPages, pages - compared);
    RAMFERRY_ASSIGN_OR_RETURN(proto::VerifyResult result,
                              NextVerifyResult(region, compared, count));
    --in_flight;
    if (!*hashed) {
      // Every core, while the destination answers the requests already
      // in flight.
      local_digests->Finish();
      *hashed = true;
    }
    absl::Span<const uint64_t> mine =
        (sent_digests_ != nullptr ? *sent_digests_ : local_digests->digests())
            .region(index)
            .subspan(compared, count);
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t digest =
          frozen_digests_ != nullptr &&
                  frozen_digests_->Has(index, compared + i)
              ? frozen_digests_->digests().region(index)[compared + i]
              : mine[i];
      if (digest == result.page_digests[i]) continue;
      ++report->pages_mismatched;
      if (report->first_mismatches.size() < 16) {
        report->first_mismatches.emplace_back(region.id, compared + i);
      }
    }
    report->pages_checked += count;
    compared += count;
  }
  return absl::OkStatus();
}

absl::Status SenderImpl::RequestDigests(const Region& region,
                                        uint64_t* requested, int* in_flight) {
  const uint64_t pages = region.page_count();
  while (*in_flight < kWindow && *requested < pages) {
    proto::VerifyRequest q{region.id, *requested,
                           static_cast<uint32_t>(std::min<uint64_t>(
                               proto::kMaxVerifyPages, pages - *requested))};
    if (absl::Status s = control_->Send(proto::EncodeVerifyRequest(q));
        !s.ok()) {
      failure_.Fail(s);
      return FinalStatus();
    }
    *requested += q.page_count;
    ++*in_flight;
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::VerifyResult> SenderImpl::NextVerifyResult(
    const Region& region, uint64_t first_page, uint64_t count) {
  if (absl::Status s =
          AwaitControl([&] { return !events_.verify_results.empty(); },
                       options_.round_timeout, "verify");
      !s.ok()) {
    return s;
  }
  proto::VerifyResult result;
  {
    std::unique_lock<std::mutex> lock(events_.mu);
    result = std::move(events_.verify_results.front());
    events_.verify_results.pop_front();
  }
  if (result.region_id != region.id || result.first_page != first_page ||
      result.page_digests.size() != count) {
    failure_.Fail(absl::InvalidArgumentError(absl::StrFormat(
        "verify result for region %d pages [%d, +%d) answers a request "
        "for region %d pages [%d, +%d)",
        result.region_id, result.first_page, result.page_digests.size(),
        region.id, first_page, count)));
    return FinalStatus();
  }
  return result;
}

}  // namespace ramferry
