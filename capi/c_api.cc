// The C API (include/ramferry/ramferry.h): a thin layer over Sender,
// Receiver, SessionOptions, Region and DirtyBitmap. Nothing throws across
// it: each entry point turns an exception into an error code. This file:
// versions, status names, regions, bitmaps, the channel counters' names,
// and what the session handles share (c_api_session.h); the options are
// c_api_options.cc's, the source's c_api_sender.cc's, the destination's
// c_api_receiver.cc's, the hand-off's c_api_handoff.cc's.
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "capi/c_api_session.h"
#include "capi/c_api_util.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/options.h"
#include "ramferry/ramferry.h"
#include "ramferry/region.h"
#include "ramferry/stats.h"
#include "ramferry/transport.h"

using namespace ramferry::capi;  // NOLINT(google-build-using-namespace)

namespace ramferry::capi {

ramferry_status FillStats(const ramferry::SessionStats& s, uint64_t rounds,
                          ramferry_stats* out) {
  const ramferry::ChannelStats t = s.Total();
  ramferry_stats r{};
  r.size = sizeof(r);
  r.channels = static_cast<uint32_t>(s.channels.size());
  r.rounds = rounds;
  r.packets = t.packets;
  r.pages = t.pages;
  r.payload_bytes = t.payload_bytes;
  r.header_bytes = t.header_bytes;
  r.zero_pages = t.zero_pages;
  r.untouched_pages = t.untouched_pages;
  r.compressed_packets = t.compressed_packets;
  r.compressed_input_bytes = t.compressed_input_bytes;
  r.compressed_output_bytes = t.compressed_output_bytes;
  r.connections_refused = s.connections_refused;
  r.auth_failures = s.auth_failures;
  r.channels_lost = s.channels_lost.size();
  r.resent_pages = s.resent_pages;
  const ramferry::PostcopyStats& p = s.postcopy;
  r.postcopy_started = p.started ? 1 : 0;
  r.postcopy_urgent_channel = p.urgent_channel ? 1 : 0;
  r.postcopy_missing_pages = p.missing_pages;
  r.postcopy_requested_pages = p.requested_pages;
  r.postcopy_urgent_pages = p.urgent_pages;
  r.postcopy_pushed_pages = p.pushed_pages;
  r.postcopy_duplicate_pages = p.duplicate_pages;
  r.postcopy_faults = p.faults;
  r.postcopy_latency_p50_us = p.latency_p50_us;
  r.postcopy_latency_p99_us = p.latency_p99_us;
  r.postcopy_latency_max_us = p.latency_max_us;
  r.postcopy_blocked_us = p.blocked_us;
  r.postcopy_switch_ns = p.switch_ns;
  r.postcopy_duration_ns = p.duration_ns;
  r.postcopy_resumes = p.resumes;
  return CopyOut(out, r);
}

ramferry_status FillRound(const ramferry::RoundResult& round,
                          ramferry_round_result* out) {
  if (out == nullptr) return RAMFERRY_OK;
  ramferry_round_result r{};
  r.size = sizeof(r);
  r.round = round.round;
  r.pages = round.pages;
  r.bytes = round.bytes;
  r.elapsed_ns = static_cast<uint64_t>(absl::ToInt64Nanoseconds(round.elapsed));
  return CopyOut(out, r);
}

absl::StatusOr<ramferry::SessionOptions> SessionFor(
    const ramferry_options& options, bool source,
    std::vector<std::string>* warnings) {
  ramferry::SessionOptions opt = options.options;
  if (options.auto_transport && source) {
    absl::StatusOr<ramferry::TransportChoice> choice =
        ramferry::ChooseTransport(opt.host);
    if (!choice.ok()) return choice.status();
    opt.transport = choice->kind;
    warnings->push_back(absl::StrCat("transport auto chose ",
                                     ramferry::TransportKindName(choice->kind),
                                     ": ", choice->reason));
  }
  if (absl::Status s = ramferry::ValidateOptions(opt); !s.ok()) return s;
  return opt;
}

absl::Status CheckRegions(const ramferry_regions* regions) {
  if (regions->regions.empty()) {
    return absl::InvalidArgumentError("no regions (ramferry_regions_add)");
  }
  return absl::OkStatus();
}

ramferry_status ChannelCounter(const ramferry::SessionStats& stats,
                               uint32_t channel, const char* name,
                               uint64_t* value) {
  if (name == nullptr) return NullArgument("name");
  if (value == nullptr) return NullArgument("value");
  const ramferry::ChannelStats* ch = nullptr;
  for (const ramferry::ChannelStats& c : stats.channels) {
    if (c.channel == channel) ch = &c;
  }
  if (ch == nullptr) {
    return Fail(nullptr, absl::OutOfRangeError(absl::StrCat(
                             "no channel ", channel, " (the session has ",
                             stats.channels.size(), ")")));
  }
  for (const ramferry::ChannelCounter& counter : ramferry::kChannelCounters) {
    if (absl::string_view(name) == counter.name) {
      *value = ch->*counter.field;
      return RAMFERRY_OK;
    }
  }
  return Fail(nullptr, absl::NotFoundError(absl::StrCat(
                           "no channel counter '", name,
                           "' (ramferry_channel_counter_name lists them)")));
}

}  // namespace ramferry::capi

// The definitions below take their C linkage from ramferry.h.

const char* ramferry_version(void) { return RAMFERRY_VERSION; }

uint32_t ramferry_version_number(void) {
  return RAMFERRY_VERSION_MAJOR * 10000 + RAMFERRY_VERSION_MINOR * 100 +
         RAMFERRY_VERSION_PATCH;
}

const char* ramferry_status_name(ramferry_status status) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  const int i = static_cast<int>(status);
  if (i < 0 || i >= static_cast<int>(std::size(kNames))) return "UNKNOWN";
  return kNames[i];
}

const char* ramferry_last_error(void) {
  return ramferry::capi::LastError().c_str();
}
// ---- regions ----

ramferry_regions* ramferry_regions_new(void) {
  return new (std::nothrow) ramferry_regions();
}

void ramferry_regions_free(ramferry_regions* regions) { delete regions; }

const char* ramferry_regions_last_error(const ramferry_regions* regions) {
  return regions == nullptr ? "" : regions->error.c_str();
}

ramferry_status ramferry_regions_add(ramferry_regions* regions, uint32_t id,
                                     void* base, uint64_t length,
                                     uint32_t page_size) {
  if (regions == nullptr) return NullArgument("regions");
  if (base == nullptr) return NullArgument("base");
  return Guard(&regions->error, [&]() -> ramferry_status {
    ramferry::Region r;
    r.id = id;
    r.name = absl::StrCat("region", id);
    r.base = base;
    r.length = length;
    r.page_size = page_size;
    if (absl::Status s = ramferry::ValidateRegion(r); !s.ok()) {
      return Fail(&regions->error, s);
    }
    for (const ramferry::Region& other : regions->regions) {
      if (other.id == id) {
        return Fail(&regions->error,
                    absl::AlreadyExistsError(
                        absl::StrCat("region id ", id, " was already added")));
      }
    }
    regions->regions.push_back(std::move(r));
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_regions_set_file(ramferry_regions* regions,
                                          uint32_t id, int fd,
                                          uint64_t fd_offset) {
  if (regions == nullptr) return NullArgument("regions");
  return Guard(&regions->error, [&]() -> ramferry_status {
    for (ramferry::Region& r : regions->regions) {
      if (r.id != id) continue;
      ramferry::Region with = r;
      with.fd = fd;
      with.fd_offset = fd < 0 ? 0 : fd_offset;
      if (absl::Status s = ramferry::ValidateRegion(with); !s.ok()) {
        return Fail(&regions->error, s);
      }
      r = std::move(with);
      return RAMFERRY_OK;
    }
    return Fail(&regions->error,
                absl::NotFoundError(absl::StrCat(
                    "no region ", id, " (ramferry_regions_add it first)")));
  });
}

size_t ramferry_regions_count(const ramferry_regions* regions) {
  return regions == nullptr ? 0 : regions->regions.size();
}

// ---- bitmaps ----

size_t ramferry_bitmap_words(uint64_t pages) {
  return static_cast<size_t>((pages + 63) / 64);
}

void ramferry_bitmap_mark(uint64_t* words, uint64_t page) {
  std::atomic_ref<uint64_t>(words[page / 64])
      .fetch_or(uint64_t{1} << (page % 64), std::memory_order_release);
}

void ramferry_bitmap_mark_range(uint64_t* words, uint64_t first,
                                uint64_t count) {
  // A view as long as the range (no page past it is touched).
  if (count == 0 || first + count < first) return;
  ramferry::DirtyBitmap::View(words, first + count).SetRange(first, count);
}

size_t ramferry_channel_counter_count(void) {
  return std::size(ramferry::kChannelCounters);
}

const char* ramferry_channel_counter_name(size_t i) {
  return i < std::size(ramferry::kChannelCounters)
             ? ramferry::kChannelCounters[i].name
             : nullptr;
}

const char* ramferry_channel_counter_doc(size_t i) {
  return i < std::size(ramferry::kChannelCounters)
             ? ramferry::kChannelCounters[i].doc
             : nullptr;
}
