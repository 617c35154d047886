// Answering VERIFY_REQUEST: the digests of the pages the source names,
// as they landed where the session records that, else as memory holds them.
#include <mutex>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "engine/receiver_impl.h"
#include "engine/verify.h"
#include "proto/control.h"

namespace ramferry {

absl::Status ReceiverImpl::AnswerVerify(absl::Span<const uint8_t> payload) {
  RAMFERRY_ASSIGN_OR_RETURN(proto::VerifyRequest q,
                            proto::DecodeVerifyRequest(payload));
  const Region* region = table_.Find(q.region_id);
  if (region == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("verify request for unknown region %d", q.region_id));
  }
  if (q.first_page > region->page_count() ||
      q.page_count > region->page_count() - q.first_page) {
    return absl::OutOfRangeError(absl::StrFormat(
        "verify request for pages [%d, +%d) of region %d with %d pages",
        q.first_page, q.page_count, q.region_id, region->page_count()));
  }
  proto::VerifyResult result;
  result.region_id = q.region_id;
  result.first_page = q.first_page;
  if (const engine::DigestTable* arrival = admission_.arrival_digests();
      arrival != nullptr) {
    // What landed, not what memory holds now: the destination may already
    // run on it, and nothing is read again. The channel threads wrote the
    // digests before they arrived at the round barrier whose confirmation
    // the source waited for; taking the barrier's lock makes that order
    // visible to this thread (and to TSan), not only to the peer.
    {
      std::lock_guard<std::mutex> lock(objects_mu_);
      if (barrier_ != nullptr) barrier_->completed_rounds();
      // The same for post-copy's placements, which the completer saw
      // done before it sent POSTCOPY_COMPLETE.
      if (postcopy_ != nullptr) postcopy_->complete();
    }
    absl::Span<const uint64_t> landed =
        arrival->region(table_.IndexOf(*region))
            .subspan(q.first_page, q.page_count);
    result.page_digests.assign(landed.begin(), landed.end());
  } else {
    result.page_digests.resize(q.page_count);
    engine::PageDigests(*region, q.first_page,
                        absl::MakeSpan(result.page_digests));
  }
  // A page no tag vouched for holds bytes that never came from the source,
  // whatever digest its last authentic arrival left: it answers as a
  // mismatch (the complement of what the source expects, unless the two
  // already differed in every bit).
  if (const engine::UnauthenticPages* u = admission_.unauthentic_pages();
      u != nullptr && u->count() != 0) {
    const size_t index = table_.IndexOf(*region);
    for (uint64_t i = 0; i < q.page_count; ++i) {
      if (u->Test(index, q.first_page + i)) {
        result.page_digests[i] = ~result.page_digests[i];
      }
    }
  }
  verified_pages_.fetch_add(q.page_count);
  return control_->Send(proto::EncodeVerifyResult(result));
}

}  // namespace ramferry
