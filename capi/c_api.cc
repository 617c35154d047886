// The C API (include/ramferry/ramferry.h): a thin layer over Sender,
// Receiver, SessionOptions, Region and DirtyBitmap. Nothing throws across
// it: each entry point turns an exception into an error code.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "capi/c_api_util.h"
#include "engine/option_rules.h"
#include "ramferry/auth_key.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/options.h"
#include "ramferry/ramferry.h"
#include "ramferry/receiver.h"
#include "ramferry/region.h"
#include "ramferry/sender.h"
#include "ramferry/stats.h"
#include "ramferry/transport.h"

using namespace ramferry::capi;  // NOLINT(google-build-using-namespace)

namespace {

// Calls `fn(session_stats)` every `interval` on a thread of its own while
// a Scope lives: the progress reports of a blocking call.
class Progress {
 public:
  void Set(ramferry_progress_fn fn, void* user, uint32_t interval_ms) {
    fn_ = fn;
    user_ = user;
    interval_ms_ = interval_ms;
  }
  void CopySettings(const Progress& other) {
    Set(other.fn_, other.user_, other.interval_ms_);
  }
  // One call at a time: the interval thread and the round's own report
  // never call the caller's function together.
  void Report(const ramferry::SessionStats& stats, bool round_done) const {
    if (fn_ == nullptr) return;
    std::lock_guard<std::mutex> lock(report_mu_);
    ramferry_progress p{};
    p.size = sizeof(p);
    p.round_done = round_done ? 1 : 0;
    p.rounds = stats.rounds;
    const ramferry::ChannelStats total = stats.Total();
    p.pages = total.pages;
    p.payload_bytes = total.payload_bytes;
    p.header_bytes = total.header_bytes;
    fn_(&p, user_);
  }
  bool enabled() const { return fn_ != nullptr; }

  // While it lives, reports stats() every interval from a thread.
  class Scope {
   public:
    Scope(const Progress& progress,
          std::function<ramferry::SessionStats()> stats) {
      if (progress.fn_ == nullptr || progress.interval_ms_ == 0) return;
      thread_ = std::thread([this, &progress, stats = std::move(stats)] {
        std::unique_lock<std::mutex> lock(mu_);
        while (!done_) {
          if (cv_.wait_for(lock,
                           std::chrono::milliseconds(progress.interval_ms_),
                           [this] { return done_; })) {
            break;
          }
          lock.unlock();
          progress.Report(stats(), false);
          lock.lock();
        }
      });
    }
    ~Scope() {
      if (!thread_.joinable()) return;
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_ = true;
      }
      cv_.notify_all();
      thread_.join();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
  };

 private:
  mutable std::mutex report_mu_;
  ramferry_progress_fn fn_ = nullptr;
  void* user_ = nullptr;
  uint32_t interval_ms_ = 0;
};

}  // namespace

struct ramferry_regions {
  std::vector<ramferry::Region> regions;
  std::string error;
};

struct ramferry_sender {
  std::vector<ramferry::Region> regions;  // the Sender's span points here
  std::unique_ptr<ramferry::Sender> sender;
  std::vector<std::string> warnings;
  Progress progress;
  std::string error;
};

struct ramferry_receiver {
  std::vector<ramferry::Region> regions;  // the Receiver's span points here
  std::unique_ptr<ramferry::Receiver> receiver;
  Progress progress;
  std::string error;
};

namespace {

// Copies `full` into the caller's struct of `size` bytes (its first
// field): an older caller gets the fields it has room for.
template <typename T>
ramferry_status CopyOut(T* out, const T& full) {
  if (out->size < sizeof(uint32_t)) {
    return Fail(nullptr, absl::InvalidArgumentError(
                             "the struct's size field is not set (set it to "
                             "sizeof the struct)"));
  }
  const uint32_t size = out->size;
  std::memcpy(out, &full, std::min<size_t>(size, sizeof(T)));
  out->size = size;
  return RAMFERRY_OK;
}

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

// The options a session starts with: "auto" resolved on the source.
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

}  // namespace

namespace {

// One per-channel counter of `stats`, by its name in
// RAMFERRY_CHANNEL_COUNTERS.
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

}  // namespace

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

// ---- options ----

ramferry_options* ramferry_options_new(void) {
  return new (std::nothrow) ramferry_options();
}

void ramferry_options_free(ramferry_options* options) { delete options; }

const char* ramferry_options_last_error(const ramferry_options* options) {
  return options == nullptr ? "" : options->error.c_str();
}

namespace {
// Runs `set` on a non-NULL options handle, recording its error there.
template <typename Fn>
ramferry_status SetOption(ramferry_options* options, Fn&& set) {
  if (options == nullptr) return NullArgument("options");
  return Guard(&options->error,
               [&] { return Check(&options->error, set(*options)); });
}
}  // namespace

ramferry_status ramferry_options_set_host(ramferry_options* options,
                                          const char* host) {
  return SetOption(options, [&](ramferry_options& o) {
    if (host == nullptr || *host == '\0') {
      return absl::InvalidArgumentError("host is NULL or empty");
    }
    o.options.host = host;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_port(ramferry_options* options,
                                          uint16_t port) {
  return SetOption(options, [&](ramferry_options& o) {
    o.options.port = port;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_transport(ramferry_options* options,
                                               const char* name) {
  return SetOption(options, [&](ramferry_options& o) -> absl::Status {
    if (name == nullptr) return absl::InvalidArgumentError("transport is NULL");
    if (absl::string_view(name) == "auto") {
      o.auto_transport = true;
      return absl::OkStatus();
    }
    absl::StatusOr<ramferry::TransportKind> kind =
        ramferry::ParseTransportKind(name);
    if (!kind.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown transport \"", name,
                       "\" (tcp, tcp-zerocopy, uring-zc, rdma or auto)"));
    }
    o.auto_transport = false;
    o.options.transport = *kind;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_channels(ramferry_options* options,
                                              uint32_t channels) {
  return SetOption(options, [&](ramferry_options& o) -> absl::Status {
    if (absl::Status s = ramferry::engine::CheckNumericOption(
            *ramferry::engine::FindNumericOptionRule("channels"), channels);
        !s.ok()) {
      return s;
    }
    o.options.channels = channels;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_key_file(ramferry_options* options,
                                              const char* path) {
  return SetOption(options, [&](ramferry_options& o) -> absl::Status {
    if (path == nullptr) return absl::InvalidArgumentError("path is NULL");
    absl::StatusOr<std::string> key = ramferry::ReadAuthKeyFile(path);
    if (!key.ok()) return key.status();
    o.options.auth_key = *std::move(key);
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_key(ramferry_options* options,
                                         const void* key, size_t length) {
  return SetOption(options, [&](ramferry_options& o) -> absl::Status {
    if (key == nullptr && length != 0) {
      return absl::InvalidArgumentError("key is NULL");
    }
    if (length < 16 || length > 1024) {
      return absl::InvalidArgumentError(
          absl::StrCat("a key must be 16 to 1024 bytes, not ", length));
    }
    o.options.auth_key.assign(static_cast<const char*>(key), length);
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_insecure(ramferry_options* options,
                                              int insecure) {
  return SetOption(options, [&](ramferry_options& o) {
    o.options.insecure = insecure != 0;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_protect(ramferry_options* options,
                                             const char* protection) {
  return SetOption(options, [&](ramferry_options& o) -> absl::Status {
    if (protection == nullptr) {
      return absl::InvalidArgumentError("protection is NULL");
    }
    absl::StatusOr<ramferry::Protection> p =
        ramferry::ParseProtection(protection);
    if (!p.ok()) return p.status();
    o.options.protect = *p;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_compression(ramferry_options* options,
                                                 const char* compression) {
  return SetOption(options, [&](ramferry_options& o) -> absl::Status {
    if (compression == nullptr) {
      return absl::InvalidArgumentError("compression is NULL");
    }
    absl::StatusOr<ramferry::Compression> c =
        ramferry::ParseCompression(compression);
    if (!c.ok()) return c.status();
    o.options.compression = *c;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_verify(ramferry_options* options,
                                            const char* mode) {
  return SetOption(options, [&](ramferry_options& o) -> absl::Status {
    if (mode == nullptr) return absl::InvalidArgumentError("mode is NULL");
    absl::StatusOr<ramferry::VerifyMode> m = ramferry::ParseVerifyMode(mode);
    if (!m.ok()) return m.status();
    o.options.verify = *m;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_max_bandwidth(ramferry_options* options,
                                                   uint64_t bytes_per_second) {
  return SetOption(options, [&](ramferry_options& o) {
    o.options.max_bandwidth = bytes_per_second;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_postcopy(ramferry_options* options,
                                              int postcopy) {
  return SetOption(options, [&](ramferry_options& o) {
    o.options.postcopy = postcopy != 0;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_postcopy_urgent_channel(
    ramferry_options* options, int urgent) {
  return SetOption(options, [&](ramferry_options& o) {
    o.options.postcopy_urgent_channel = urgent != 0;
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_postcopy_resume_timeout_ms(
    ramferry_options* options, uint64_t milliseconds) {
  return SetOption(options, [&](ramferry_options& o) {
    o.options.postcopy_resume_timeout =
        absl::Milliseconds(static_cast<int64_t>(milliseconds));
    return absl::OkStatus();
  });
}

ramferry_status ramferry_options_set_connect_timeout_ms(
    ramferry_options* options, uint64_t milliseconds) {
  return SetOption(options, [&](ramferry_options& o) {
    o.options.connect_timeout =
        absl::Milliseconds(static_cast<int64_t>(milliseconds));
    return absl::OkStatus();
  });
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

// ---- source ----

ramferry_status ramferry_sender_connect(const ramferry_options* options,
                                        const ramferry_regions* regions,
                                        ramferry_sender** out) {
  if (out == nullptr) return NullArgument("out");
  *out = nullptr;
  if (options == nullptr) return NullArgument("options");
  if (regions == nullptr) return NullArgument("regions");
  return Guard(nullptr, [&]() -> ramferry_status {
    if (absl::Status s = CheckRegions(regions); !s.ok()) {
      return Fail(nullptr, s);
    }
    auto handle = std::make_unique<ramferry_sender>();
    absl::StatusOr<ramferry::SessionOptions> opt =
        SessionFor(*options, /*source=*/true, &handle->warnings);
    if (!opt.ok()) return Fail(nullptr, opt.status());
    handle->regions = regions->regions;
    absl::StatusOr<std::unique_ptr<ramferry::Sender>> sender =
        ramferry::Sender::Connect(*opt, handle->regions);
    if (!sender.ok()) return Fail(nullptr, sender.status());
    handle->sender = *std::move(sender);
    for (std::string& w : handle->sender->warnings()) {
      handle->warnings.push_back(std::move(w));
    }
    *out = handle.release();
    return RAMFERRY_OK;
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
  if (sender == nullptr) return NullArgument("sender");
  return Blocking(sender, [&]() -> ramferry_status {
    absl::StatusOr<std::vector<ramferry::DirtyBitmap>> views =
        Views(sender->regions, bitmaps, count);
    if (!views.ok()) return Fail(&sender->error, views.status());
    std::vector<ramferry::DirtyBitmap*> ptrs = Pointers(*views);
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
  if (sender == nullptr) return NullArgument("sender");
  return Blocking(sender, [&]() -> ramferry_status {
    absl::StatusOr<std::vector<ramferry::DirtyBitmap>> views =
        Views(sender->regions, bitmaps, count);
    if (!views.ok()) return Fail(&sender->error, views.status());
    std::vector<ramferry::DirtyBitmap*> ptrs = Pointers(*views);
    return Check(&sender->error, sender->sender->StartRound(ptrs));
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
  if (sender == nullptr) return NullArgument("sender");
  return Blocking(sender, [&]() -> ramferry_status {
    absl::StatusOr<std::vector<ramferry::DirtyBitmap>> views =
        Views(sender->regions, missing, count);
    if (!views.ok()) return Fail(&sender->error, views.status());
    std::vector<ramferry::DirtyBitmap*> ptrs = Pointers(*views);
    return Check(&sender->error, sender->sender->StartPostcopy(ptrs));
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
    if (absl::Status s = CheckRegions(regions); !s.ok()) {
      return Fail(nullptr, s);
    }
    auto handle = std::make_unique<ramferry_sender>();
    absl::StatusOr<ramferry::SessionOptions> opt =
        SessionFor(*options, /*source=*/true, &handle->warnings);
    if (!opt.ok()) return Fail(nullptr, opt.status());
    handle->regions = regions->regions;
    absl::StatusOr<std::unique_ptr<ramferry::Sender>> sender =
        ramferry::Sender::ResumePostcopy(*opt, handle->regions, *cut->sender);
    if (!sender.ok()) return Fail(nullptr, sender.status());
    handle->sender = *std::move(sender);
    handle->progress.CopySettings(cut->progress);
    *out = handle.release();
    return RAMFERRY_OK;
  });
}

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

ramferry_status ramferry_sender_channel_counter(const ramferry_sender* sender,
                                                uint32_t channel,
                                                const char* name,
                                                uint64_t* value) {
  if (sender == nullptr) return NullArgument("sender");
  return Guard(nullptr, [&] {
    return ChannelCounter(sender->sender->stats(), channel, name, value);
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
