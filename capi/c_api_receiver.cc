// The C API's destination (ramferry_receiver_*): a Receiver behind a
// handle, its post-copy calls and the progress of Serve.
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
#include "ramferry/receiver.h"

using namespace ramferry::capi;  // NOLINT(google-build-using-namespace)

// ---- destination ----

ramferry_status ramferry_receiver_listen(const ramferry_options* options,
                                         const ramferry_regions* regions,
                                         ramferry_receiver** out) {
  if (out == nullptr) return NullArgument("out");
  *out = nullptr;
  if (options == nullptr) return NullArgument("options");
  if (regions == nullptr) return NullArgument("regions");
  return Guard(nullptr, [&]() -> ramferry_status {
    if (absl::Status s = CheckRegions(regions); !s.ok()) {
      return Fail(nullptr, s);
    }
    absl::StatusOr<ramferry::SessionOptions> opt =
        SessionFor(*options, /*source=*/false, nullptr);
    if (!opt.ok()) return Fail(nullptr, opt.status());
    auto handle = std::make_unique<ramferry_receiver>();
    handle->regions = regions->regions;
    absl::StatusOr<std::unique_ptr<ramferry::Receiver>> receiver =
        ramferry::Receiver::Listen(*opt, handle->regions);
    if (!receiver.ok()) return Fail(nullptr, receiver.status());
    handle->receiver = *std::move(receiver);
    *out = handle.release();
    return RAMFERRY_OK;
  });
}

void ramferry_receiver_free(ramferry_receiver* receiver) { delete receiver; }

const char* ramferry_receiver_last_error(const ramferry_receiver* receiver) {
  return receiver == nullptr ? "" : receiver->error.c_str();
}

ramferry_status ramferry_receiver_port(const ramferry_receiver* receiver,
                                       uint16_t* port) {
  if (receiver == nullptr) return NullArgument("receiver");
  if (port == nullptr) return NullArgument("port");
  return Guard(nullptr, [&] {
    *port = receiver->receiver->port();
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_receiver_serve(ramferry_receiver* receiver) {
  if (receiver == nullptr) return NullArgument("receiver");
  return Guard(&receiver->error, [&] {
    Progress::Scope scope(receiver->progress,
                          [receiver] { return receiver->receiver->stats(); });
    return Check(&receiver->error, receiver->receiver->Serve());
  });
}

ramferry_status ramferry_receiver_abort(ramferry_receiver* receiver,
                                        const char* reason) {
  if (receiver == nullptr) return NullArgument("receiver");
  return Guard(nullptr, [&] {
    receiver->receiver->Abort(absl::CancelledError(
        reason == nullptr ? "aborted by the caller" : reason));
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_receiver_stats(const ramferry_receiver* receiver,
                                        ramferry_stats* stats) {
  if (receiver == nullptr) return NullArgument("receiver");
  if (stats == nullptr) return NullArgument("stats");
  return Guard(nullptr, [&] {
    return FillStats(receiver->receiver->stats(),
                     receiver->receiver->applied_rounds(), stats);
  });
}

ramferry_status ramferry_receiver_applied_rounds(
    const ramferry_receiver* receiver, uint64_t* rounds) {
  if (receiver == nullptr) return NullArgument("receiver");
  if (rounds == nullptr) return NullArgument("rounds");
  return Guard(nullptr, [&] {
    *rounds = receiver->receiver->applied_rounds();
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_receiver_verified_pages(
    const ramferry_receiver* receiver, uint64_t* pages) {
  if (receiver == nullptr) return NullArgument("receiver");
  if (pages == nullptr) return NullArgument("pages");
  return Guard(nullptr, [&] {
    *pages = receiver->receiver->verified_pages();
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_receiver_set_progress(ramferry_receiver* receiver,
                                               ramferry_progress_fn fn,
                                               void* user,
                                               uint32_t interval_ms) {
  if (receiver == nullptr) return NullArgument("receiver");
  return Guard(nullptr, [&] {
    receiver->progress.Set(fn, user, interval_ms);
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_receiver_on_armed(ramferry_receiver* receiver,
                                           ramferry_armed_fn fn, void* user) {
  if (receiver == nullptr) return NullArgument("receiver");
  return Guard(&receiver->error, [&] {
    if (fn == nullptr) {
      receiver->receiver->OnPostcopyArmed(nullptr);
    } else {
      receiver->receiver->OnPostcopyArmed([fn, user] { fn(user); });
    }
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_receiver_on_commit(ramferry_receiver* receiver,
                                            ramferry_commit_fn fn, void* user) {
  if (receiver == nullptr) return NullArgument("receiver");
  return Guard(&receiver->error, [&] {
    if (fn == nullptr) {
      receiver->receiver->OnCommit(nullptr);
    } else {
      receiver->receiver->OnCommit([fn, user] {
        return fn(user) == 0 ? absl::OkStatus()
                             : absl::CancelledError(
                                   "the caller's commit callback refused the "
                                   "source's FINISH");
      });
    }
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_receiver_is_resident(const ramferry_receiver* receiver,
                                              uint32_t region_id,
                                              uint64_t first_page,
                                              uint64_t pages, int* resident) {
  if (receiver == nullptr) return NullArgument("receiver");
  if (resident == nullptr) return NullArgument("resident");
  return Guard(nullptr, [&] {
    *resident =
        receiver->receiver->IsResident(region_id, first_page, pages) ? 1 : 0;
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_receiver_wait_resident(ramferry_receiver* receiver,
                                                uint32_t region_id,
                                                uint64_t first_page,
                                                uint64_t pages,
                                                uint64_t timeout_ms) {
  if (receiver == nullptr) return NullArgument("receiver");
  return Guard(nullptr, [&] {
    return Check(nullptr,
                 receiver->receiver->WaitResident(
                     region_id, first_page, pages,
                     absl::Now() +
                         absl::Milliseconds(static_cast<int64_t>(timeout_ms))));
  });
}

ramferry_status ramferry_receiver_request_pages(ramferry_receiver* receiver,
                                                uint32_t region_id,
                                                uint64_t first_page,
                                                uint64_t pages) {
  if (receiver == nullptr) return NullArgument("receiver");
  return Guard(nullptr, [&] {
    return Check(nullptr, receiver->receiver->RequestPages(region_id,
                                                           first_page, pages));
  });
}

ramferry_status ramferry_receiver_release_postcopy(ramferry_receiver* receiver,
                                                   uint64_t* filled) {
  if (receiver == nullptr) return NullArgument("receiver");
  return Guard(&receiver->error, [&]() -> ramferry_status {
    absl::StatusOr<uint64_t> n = receiver->receiver->ReleasePostcopy();
    if (!n.ok()) return Fail(&receiver->error, n.status());
    if (filled != nullptr) *filled = *n;
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_receiver_channel_counter(
    const ramferry_receiver* receiver, uint32_t channel, const char* name,
    uint64_t* value) {
  if (receiver == nullptr) return NullArgument("receiver");
  return Guard(nullptr, [&] {
    return ChannelCounter(receiver->receiver->stats(), channel, name, value);
  });
}
