// The C API's source (ramferry_sender_*): a Sender behind a handle, its
// blocking calls reporting progress while they run.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "capi/c_api_session.h"
#include "capi/c_api_util.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/ramferry.h"
#include "ramferry/sender.h"

using namespace ramferry::capi;  // NOLINT(google-build-using-namespace)

// ---- source ----

namespace {

// A source's handle around the Sender that `start` makes over the
// handle's own copy of the regions (the Sender's span points there), with
// the warnings of the options' resolution and of the session.
template <typename Start>
ramferry_status NewSender(const ramferry_options& options,
                          const ramferry_regions& regions, Start start,
                          std::unique_ptr<ramferry_sender>* out) {
  if (absl::Status s = CheckRegions(&regions); !s.ok()) {
    return Fail(nullptr, s);
  }
  auto handle = std::make_unique<ramferry_sender>();
  absl::StatusOr<ramferry::SessionOptions> opt =
      SessionFor(options, /*source=*/true, &handle->warnings);
  if (!opt.ok()) return Fail(nullptr, opt.status());
  handle->regions = regions.regions;
  absl::StatusOr<std::unique_ptr<ramferry::Sender>> sender =
      start(*opt, absl::MakeConstSpan(handle->regions));
  if (!sender.ok()) return Fail(nullptr, sender.status());
  handle->sender = *std::move(sender);
  for (std::string& w : handle->sender->warnings()) {
    handle->warnings.push_back(std::move(w));
  }
  *out = std::move(handle);
  return RAMFERRY_OK;
}

}  // namespace

ramferry_status ramferry_sender_connect(const ramferry_options* options,
                                        const ramferry_regions* regions,
                                        ramferry_sender** out) {
  if (out == nullptr) return NullArgument("out");
  *out = nullptr;
  if (options == nullptr) return NullArgument("options");
  if (regions == nullptr) return NullArgument("regions");
  return Guard(nullptr, [&]() -> ramferry_status {
    std::unique_ptr<ramferry_sender> handle;
    const ramferry_status status = NewSender(
        *options, *regions,
        [](const ramferry::SessionOptions& opt,
           absl::Span<const ramferry::Region> r) {
          return ramferry::Sender::Connect(opt, r);
        },
        &handle);
    if (status == RAMFERRY_OK) *out = handle.release();
    return status;
  });
}

void ramferry_sender_free(ramferry_sender* sender) { delete sender; }

const char* ramferry_sender_last_error(const ramferry_sender* sender) {
  return sender == nullptr ? "" : sender->error.c_str();
}

namespace {
// Runs a blocking call on `sender` with its progress reports.
template <typename Fn>
ramferry_status Blocking(ramferry_sender* sender, Fn&& fn) {
  return Guard(&sender->error, [&]() -> ramferry_status {
    Progress::Scope scope(sender->progress,
                          [sender] { return sender->sender->stats(); });
    return fn();
  });
}

// A blocking call on `sender` given the caller's bitmaps, one per region:
// `fn` gets them as views over the caller's words (nothing is copied).
template <typename Fn>
ramferry_status WithBitmaps(ramferry_sender* sender, uint64_t* const* bitmaps,
                            size_t count, Fn&& fn) {
  if (sender == nullptr) return NullArgument("sender");
  return Blocking(sender, [&]() -> ramferry_status {
    absl::StatusOr<std::vector<ramferry::DirtyBitmap>> views =
        Views(sender->regions, bitmaps, count);
    if (!views.ok()) return Fail(&sender->error, views.status());
    return fn(Pointers(*views));
  });
}

void RoundDone(ramferry_sender* sender) {
  if (sender->progress.enabled()) {
    sender->progress.Report(sender->sender->stats(), true);
  }
}
}  // namespace

ramferry_status ramferry_sender_send_round(ramferry_sender* sender,
                                           uint64_t* const* bitmaps,
                                           size_t count,
                                           ramferry_round_result* result) {
  return WithBitmaps(
      sender, bitmaps, count,
      [&](absl::Span<ramferry::DirtyBitmap* const> ptrs) -> ramferry_status {
        absl::StatusOr<ramferry::RoundResult> round =
            sender->sender->SendRound(ptrs);
        if (!round.ok()) return Fail(&sender->error, round.status());
        RoundDone(sender);
        return FillRound(*round, result);
      });
}

ramferry_status ramferry_sender_start_round(ramferry_sender* sender,
                                            uint64_t* const* bitmaps,
                                            size_t count) {
  return WithBitmaps(sender, bitmaps, count,
                     [&](absl::Span<ramferry::DirtyBitmap* const> ptrs) {
                       return Check(&sender->error,
                                    sender->sender->StartRound(ptrs));
                     });
}

ramferry_status ramferry_sender_await_round(ramferry_sender* sender,
                                            ramferry_round_result* result) {
  if (sender == nullptr) return NullArgument("sender");
  return Blocking(sender, [&]() -> ramferry_status {
    absl::StatusOr<ramferry::RoundResult> round = sender->sender->AwaitRound();
    if (!round.ok()) return Fail(&sender->error, round.status());
    RoundDone(sender);
    return FillRound(*round, result);
  });
}

ramferry_status ramferry_sender_verify(ramferry_sender* sender,
                                       ramferry_verify_report* report) {
  if (sender == nullptr) return NullArgument("sender");
  return Blocking(sender, [&]() -> ramferry_status {
    absl::StatusOr<ramferry::VerifyReport> v = sender->sender->Verify();
    if (!v.ok()) return Fail(&sender->error, v.status());
    ramferry_verify_report r{};
    r.size = sizeof(r);
    r.pages_checked = v->pages_checked;
    r.pages_mismatched = v->pages_mismatched;
    if (!v->first_mismatches.empty()) {
      r.first_mismatch_region = v->first_mismatches[0].first;
      r.first_mismatch_page = v->first_mismatches[0].second;
    }
    if (report != nullptr) {
      if (ramferry_status s = CopyOut(report, r); s != RAMFERRY_OK) return s;
    }
    if (!v->ok()) {
      return Fail(&sender->error,
                  absl::DataLossError(absl::StrCat(
                      "verify: ", v->pages_mismatched, " of ", v->pages_checked,
                      " pages differ (first: region ", r.first_mismatch_region,
                      " page ", r.first_mismatch_page, ")")));
    }
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_sender_start_verify(ramferry_sender* sender) {
  if (sender == nullptr) return NullArgument("sender");
  return Guard(&sender->error, [&] {
    return Check(&sender->error, sender->sender->StartVerify());
  });
}

ramferry_status ramferry_sender_finish(ramferry_sender* sender) {
  if (sender == nullptr) return NullArgument("sender");
  return Blocking(
      sender, [&] { return Check(&sender->error, sender->sender->Finish()); });
}

ramferry_status ramferry_sender_commit_outcome(const ramferry_sender* sender,
                                               uint32_t* outcome) {
  if (sender == nullptr) return NullArgument("sender");
  if (outcome == nullptr) return NullArgument("outcome");
  switch (sender->sender->commit_outcome()) {
    case ramferry::CommitOutcome::kPending:
      *outcome = RAMFERRY_COMMIT_PENDING;
      break;
    case ramferry::CommitOutcome::kCommitted:
      *outcome = RAMFERRY_COMMIT_YES;
      break;
    case ramferry::CommitOutcome::kNotCommitted:
      *outcome = RAMFERRY_COMMIT_NO;
      break;
    case ramferry::CommitOutcome::kUnknown:
      *outcome = RAMFERRY_COMMIT_UNKNOWN;
      break;
  }
  return RAMFERRY_OK;
}

ramferry_status ramferry_sender_abort(ramferry_sender* sender,
                                      const char* reason) {
  if (sender == nullptr) return NullArgument("sender");
  return Guard(nullptr, [&] {
    sender->sender->Abort(absl::CancelledError(
        reason == nullptr ? "aborted by the caller" : reason));
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_sender_set_max_bandwidth(ramferry_sender* sender,
                                                  uint64_t bytes_per_second) {
  if (sender == nullptr) return NullArgument("sender");
  return Guard(nullptr, [&] {
    sender->sender->SetMaxBandwidth(bytes_per_second);
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_sender_stats(const ramferry_sender* sender,
                                      ramferry_stats* stats) {
  if (sender == nullptr) return NullArgument("sender");
  if (stats == nullptr) return NullArgument("stats");
  return Guard(nullptr, [&] {
    return FillStats(sender->sender->stats(),
                     sender->sender->confirmed_rounds(), stats);
  });
}

ramferry_status ramferry_sender_warning_count(const ramferry_sender* sender,
                                              size_t* count) {
  if (sender == nullptr) return NullArgument("sender");
  if (count == nullptr) return NullArgument("count");
  *count = sender->warnings.size();
  return RAMFERRY_OK;
}

const char* ramferry_sender_warning(const ramferry_sender* sender, size_t i) {
  if (sender == nullptr || i >= sender->warnings.size()) return nullptr;
  return sender->warnings[i].c_str();
}

ramferry_status ramferry_sender_set_progress(ramferry_sender* sender,
                                             ramferry_progress_fn fn,
                                             void* user, uint32_t interval_ms) {
  if (sender == nullptr) return NullArgument("sender");
  return Guard(nullptr, [&] {
    sender->progress.Set(fn, user, interval_ms);
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_sender_start_postcopy(ramferry_sender* sender,
                                               uint64_t* const* missing,
                                               size_t count) {
  return WithBitmaps(sender, missing, count,
                     [&](absl::Span<ramferry::DirtyBitmap* const> ptrs) {
                       return Check(&sender->error,
                                    sender->sender->StartPostcopy(ptrs));
                     });
}

ramferry_status ramferry_sender_complete_postcopy(ramferry_sender* sender) {
  if (sender == nullptr) return NullArgument("sender");
  return Blocking(sender, [&] {
    return Check(&sender->error, sender->sender->CompletePostcopy());
  });
}

ramferry_status ramferry_sender_resume_postcopy(const ramferry_options* options,
                                                const ramferry_regions* regions,
                                                const ramferry_sender* cut,
                                                ramferry_sender** out) {
  if (out == nullptr) return NullArgument("out");
  *out = nullptr;
  if (options == nullptr) return NullArgument("options");
  if (regions == nullptr) return NullArgument("regions");
  if (cut == nullptr) return NullArgument("cut");
  return Guard(nullptr, [&]() -> ramferry_status {
    std::unique_ptr<ramferry_sender> handle;
    const ramferry_status status = NewSender(
        *options, *regions,
        [cut](const ramferry::SessionOptions& opt,
              absl::Span<const ramferry::Region> r) {
          return ramferry::Sender::ResumePostcopy(opt, r, *cut->sender);
        },
        &handle);
    if (status != RAMFERRY_OK) return status;
    handle->progress.CopySettings(cut->progress);
    *out = handle.release();
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_sender_channel_counter(const ramferry_sender* sender,
                                                uint32_t channel,
                                                const char* name,
                                                uint64_t* value) {
  if (sender == nullptr) return NullArgument("sender");
  return Guard(nullptr, [&] {
    return ChannelCounter(sender->sender->stats(), channel, name, value);
  });
}
