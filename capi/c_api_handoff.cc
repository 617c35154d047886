// The C API of the memory hand-off (ramferry.h, "memory of another
// process"): thin wrappers over ramferry/memory_handoff.h.
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "capi/c_api_session.h"
#include "capi/c_api_util.h"
#include "ramferry/memory_handoff.h"
#include "ramferry/ramferry.h"

using namespace ramferry::capi;  // NOLINT(google-build-using-namespace)

struct ramferry_shared_regions {
  std::vector<ramferry::SharedRegion> regions;
  std::string error;
};

namespace {
// The export whose event handler runs on this thread, by its token.
thread_local const int* t_in_handler_of = nullptr;
}  // namespace

struct ramferry_export {
  std::unique_ptr<ramferry::MemoryExport> exp;
  std::string error;
  // Names this export to its handler's thread (t_in_handler_of).
  std::shared_ptr<const int> token;
};

struct ramferry_attach {
  std::unique_ptr<ramferry::AttachedMemory> att;
  std::string error;
};

struct ramferry_adopt {
  std::unique_ptr<ramferry::AdoptedMemory> adopt;
  std::string error;
};

namespace {

absl::Duration Millis(uint64_t ms) {
  return ms > uint64_t{1} << 62 ? absl::InfiniteDuration()
                                : absl::Milliseconds(static_cast<int64_t>(ms));
}

ramferry_export_event ToC(ramferry::ExportEvent e) {
  switch (e) {
    case ramferry::ExportEvent::kPause:
      return RAMFERRY_EXPORT_PAUSE;
    case ramferry::ExportEvent::kResume:
      return RAMFERRY_EXPORT_RESUME;
    case ramferry::ExportEvent::kMigrated:
      return RAMFERRY_EXPORT_MIGRATED;
    case ramferry::ExportEvent::kDetachedWhilePaused:
      return RAMFERRY_EXPORT_DETACHED_WHILE_PAUSED;
  }
  return RAMFERRY_EXPORT_RESUME;
}

}  // namespace

ramferry_shared_regions* ramferry_shared_regions_new(void) {
  return new (std::nothrow) ramferry_shared_regions();
}

void ramferry_shared_regions_free(ramferry_shared_regions* regions) {
  delete regions;
}

ramferry_status ramferry_shared_regions_add(ramferry_shared_regions* regions,
                                            uint32_t id, void* base,
                                            uint64_t length, int fd,
                                            uint64_t fd_offset) {
  if (regions == nullptr) return NullArgument("regions");
  return Guard(&regions->error, [&] {
    regions->regions.push_back(
        {id, absl::StrCat("region", id), base, length, fd, fd_offset});
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_export_listen(const char* socket_path,
                                       const ramferry_shared_regions* regions,
                                       ramferry_export_fn fn, void* user,
                                       ramferry_export** out) {
  return ramferry_export_listen_with(socket_path, regions, fn, user, 0, out);
}

ramferry_status ramferry_export_listen_with(
    const char* socket_path, const ramferry_shared_regions* regions,
    ramferry_export_fn fn, void* user, uint32_t flags, ramferry_export** out) {
  if (out == nullptr) return NullArgument("out");
  *out = nullptr;
  if (socket_path == nullptr) return NullArgument("socket_path");
  if (regions == nullptr) return NullArgument("regions");
  if ((flags & ~RAMFERRY_EXPORT_ALLOW_HAND_OVER) != 0) {
    return Fail(nullptr,
                absl::InvalidArgumentError(absl::StrCat(
                    "ramferry_export_listen_with: unknown flags 0x",
                    absl::Hex(flags & ~RAMFERRY_EXPORT_ALLOW_HAND_OVER),
                    " (a newer header than this library?)")));
  }
  return Guard(nullptr, [&] {
    auto token = std::make_shared<const int>(0);
    ramferry::MemoryExport::EventHandler handler;
    if (fn != nullptr) {
      handler = [fn, user, t = token.get()](ramferry::ExportEvent e) {
        t_in_handler_of = t;
        fn(user, ToC(e));
        t_in_handler_of = nullptr;
      };
    }
    ramferry::ExportOptions options;
    options.allow_hand_over = (flags & RAMFERRY_EXPORT_ALLOW_HAND_OVER) != 0;
    auto exp = ramferry::MemoryExport::Listen(socket_path, regions->regions,
                                              std::move(handler), options);
    if (!exp.ok()) return Fail(nullptr, exp.status());
    *out = new ramferry_export{*std::move(exp), {}, std::move(token)};
    return RAMFERRY_OK;
  });
}

void ramferry_export_free(ramferry_export* exp) {
  if (exp == nullptr) return;
  // From its own handler (done at MIGRATED, say), the export's thread
  // cannot wait for itself to end: another thread frees it once the
  // handler has returned.
  if (t_in_handler_of != nullptr && t_in_handler_of == exp->token.get()) {
    try {
      std::thread([exp] { delete exp; }).detach();
      return;
    } catch (const std::system_error&) {
      // No thread to spare: the export stays, as if never freed.
      return;
    }
  }
  delete exp;
}

const char* ramferry_export_last_error(const ramferry_export* exp) {
  return exp == nullptr ? "" : exp->error.c_str();
}

ramferry_status ramferry_export_wait_migrated(ramferry_export* exp,
                                              uint64_t timeout_ms) {
  if (exp == nullptr) return NullArgument("exp");
  return Guard(&exp->error, [&] {
    return Check(&exp->error, exp->exp->WaitMigrated(Millis(timeout_ms)));
  });
}

ramferry_status ramferry_export_paused_at_ns(const ramferry_export* exp,
                                             int64_t* ns) {
  if (exp == nullptr) return NullArgument("exp");
  if (ns == nullptr) return NullArgument("ns");
  *ns = exp->exp->paused_at_ns();
  return RAMFERRY_OK;
}

ramferry_status ramferry_attach_open(const char* socket_path,
                                     uint64_t timeout_ms,
                                     ramferry_attach** out) {
  if (out == nullptr) return NullArgument("out");
  *out = nullptr;
  if (socket_path == nullptr) return NullArgument("socket_path");
  return Guard(nullptr, [&] {
    auto att =
        ramferry::AttachedMemory::Attach(socket_path, Millis(timeout_ms));
    if (!att.ok()) return Fail(nullptr, att.status());
    *out = new ramferry_attach{*std::move(att), {}};
    return RAMFERRY_OK;
  });
}

void ramferry_attach_free(ramferry_attach* att) { delete att; }

const char* ramferry_attach_last_error(const ramferry_attach* att) {
  return att == nullptr ? "" : att->error.c_str();
}

ramferry_status ramferry_attach_region_count(const ramferry_attach* att,
                                             size_t* count) {
  if (att == nullptr) return NullArgument("att");
  if (count == nullptr) return NullArgument("count");
  *count = att->att->regions().size();
  return RAMFERRY_OK;
}

ramferry_status ramferry_attach_region(const ramferry_attach* att, size_t i,
                                       uint32_t* id, void** base,
                                       uint64_t* length) {
  if (att == nullptr) return NullArgument("att");
  return Guard(nullptr, [&] {
    const auto regions = att->att->regions();
    if (i >= regions.size()) {
      return Fail(nullptr, absl::OutOfRangeError(absl::StrCat(
                               "region ", i, " of ", regions.size())));
    }
    if (id != nullptr) *id = regions[i].id;
    if (base != nullptr) *base = regions[i].base;
    if (length != nullptr) *length = regions[i].length;
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_attach_collect(ramferry_attach* att,
                                        uint64_t* const* bitmaps, size_t count,
                                        uint64_t* reported) {
  if (att == nullptr) return NullArgument("att");
  return Guard(&att->error, [&] {
    const auto regions = att->att->regions();
    auto views = Views({regions.begin(), regions.end()}, bitmaps, count);
    if (!views.ok()) return Fail(&att->error, views.status());
    std::vector<ramferry::DirtyBitmap*> ptrs = Pointers(*views);
    absl::StatusOr<uint64_t> n = att->att->CollectWritten(ptrs);
    if (!n.ok()) return Fail(&att->error, n.status());
    if (reported != nullptr) *reported = *n;
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_attach_pause(ramferry_attach* att,
                                      uint64_t timeout_ms) {
  if (att == nullptr) return NullArgument("att");
  return Guard(&att->error, [&] {
    return Check(&att->error, att->att->Pause(Millis(timeout_ms)));
  });
}

ramferry_status ramferry_attach_resume(ramferry_attach* att) {
  if (att == nullptr) return NullArgument("att");
  return Guard(&att->error,
               [&] { return Check(&att->error, att->att->Resume()); });
}

ramferry_status ramferry_attach_migrated(ramferry_attach* att) {
  if (att == nullptr) return NullArgument("att");
  return Guard(&att->error,
               [&] { return Check(&att->error, att->att->Migrated()); });
}

namespace {

ramferry_hand_over_outcome ToC(ramferry::HandOverReport::Outcome o) {
  switch (o) {
    case ramferry::HandOverReport::Outcome::kMigrated:
      return RAMFERRY_HAND_OVER_MIGRATED;
    case ramferry::HandOverReport::Outcome::kResumed:
      return RAMFERRY_HAND_OVER_RESUMED;
    case ramferry::HandOverReport::Outcome::kNotPaused:
      return RAMFERRY_HAND_OVER_NOT_PAUSED;
    case ramferry::HandOverReport::Outcome::kResumeFailed:
      return RAMFERRY_HAND_OVER_RESUME_FAILED;
  }
  return RAMFERRY_HAND_OVER_RESUME_FAILED;
}

}  // namespace

ramferry_status ramferry_hand_over_attached(const char* attach_socket,
                                            const char* adopt_socket,
                                            uint64_t timeout_ms, int verify,
                                            ramferry_hand_over_report* out) {
  if (attach_socket == nullptr) return NullArgument("attach_socket");
  if (adopt_socket == nullptr) return NullArgument("adopt_socket");
  if (out != nullptr && out->size < sizeof(uint32_t)) {
    return Fail(nullptr, absl::StatusCode::kInvalidArgument,
                "the report's size field is not set (set it to sizeof "
                "the struct)");
  }
  return Guard(nullptr, [&] {
    ramferry::HandOverOptions o;
    o.attach_timeout = o.adopt_timeout = Millis(timeout_ms);
    o.verify = verify != 0;
    const ramferry::HandOverReport r =
        ramferry::HandOverAttached(attach_socket, adopt_socket, o);
    if (out != nullptr) {
      ramferry_hand_over_report full{};
      full.size = sizeof full;
      full.outcome = ToC(r.outcome);
      full.regions = static_cast<uint32_t>(r.regions);
      full.paused_by_signal = r.pause_method == "SIGSTOP";
      full.bytes = r.bytes;
      full.workload_pid = r.workload_pid;
      full.pause_ns = r.pause_ns;
      full.grant_ns = r.grant_ns;
      full.verify_ns = r.verify_ns;
      full.hand_over_ns = r.hand_over_ns;
      full.downtime_ns = r.downtime_ns;
      full.paused_at_ns = r.paused_at_ns;
      if (ramferry_status s = CopyOut(out, full); s != RAMFERRY_OK) return s;
    }
    if (r.outcome != ramferry::HandOverReport::Outcome::kMigrated) {
      return Fail(nullptr, r.status);
    }
    return RAMFERRY_OK;
  });
}

ramferry_status ramferry_hand_over_memory(
    const char* socket_path, const ramferry_shared_regions* regions,
    uint64_t timeout_ms) {
  if (socket_path == nullptr) return NullArgument("socket_path");
  if (regions == nullptr) return NullArgument("regions");
  return Guard(nullptr, [&] {
    return Check(nullptr,
                 ramferry::HandOverMemory(socket_path, regions->regions,
                                          Millis(timeout_ms)));
  });
}

ramferry_status ramferry_adopt_listen(const char* socket_path,
                                      ramferry_adopt** out) {
  if (out == nullptr) return NullArgument("out");
  *out = nullptr;
  if (socket_path == nullptr) return NullArgument("socket_path");
  return Guard(nullptr, [&] {
    auto adopt = ramferry::AdoptedMemory::Listen(socket_path);
    if (!adopt.ok()) return Fail(nullptr, adopt.status());
    *out = new ramferry_adopt{*std::move(adopt), {}};
    return RAMFERRY_OK;
  });
}

void ramferry_adopt_free(ramferry_adopt* adopt) { delete adopt; }

const char* ramferry_adopt_last_error(const ramferry_adopt* adopt) {
  return adopt == nullptr ? "" : adopt->error.c_str();
}

ramferry_status ramferry_adopt_wait(ramferry_adopt* adopt,
                                    uint64_t timeout_ms) {
  if (adopt == nullptr) return NullArgument("adopt");
  return Guard(&adopt->error, [&] {
    return Check(&adopt->error, adopt->adopt->Wait(Millis(timeout_ms)));
  });
}

ramferry_status ramferry_adopt_region_count(const ramferry_adopt* adopt,
                                            size_t* count) {
  if (adopt == nullptr) return NullArgument("adopt");
  if (count == nullptr) return NullArgument("count");
  *count = adopt->adopt->regions().size();
  return RAMFERRY_OK;
}

ramferry_status ramferry_adopt_region(const ramferry_adopt* adopt, size_t i,
                                      uint32_t* id, void** base,
                                      uint64_t* length, int* fd) {
  if (adopt == nullptr) return NullArgument("adopt");
  return Guard(nullptr, [&] {
    const auto regions = adopt->adopt->regions();
    if (i >= regions.size()) {
      return Fail(nullptr, absl::OutOfRangeError(absl::StrCat(
                               "region ", i, " of ", regions.size(),
                               " (ramferry_adopt_wait first)")));
    }
    if (id != nullptr) *id = regions[i].id;
    if (base != nullptr) *base = regions[i].base;
    if (length != nullptr) *length = regions[i].length;
    if (fd != nullptr) *fd = regions[i].fd;
    return RAMFERRY_OK;
  });
}
