// What every part of the C API shares: errors recorded per handle and per
// thread, exceptions stopped at the boundary, the caller's bitmap words
// viewed in place.
#ifndef RAMFERRY_CAPI_C_API_UTIL_H_
#define RAMFERRY_CAPI_C_API_UTIL_H_

#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "ramferry/dirty_bitmap.h"
#include "ramferry/options.h"
#include "ramferry/ramferry.h"
#include "ramferry/region.h"

// The options handle: c_api_options.cc's setters fill it, the source and
// the destination start their sessions from it (SessionFor).
struct ramferry_options {
  ramferry::SessionOptions options;
  bool auto_transport = false;
  std::string error;
};

namespace ramferry::capi {

// The calling thread's last error message (ramferry_last_error).
inline std::string& LastError() {
  thread_local std::string message;
  return message;
}

inline ramferry_status Code(absl::StatusCode code) {
  return static_cast<ramferry_status>(static_cast<int>(code));
}

// What an error says when memory for its own message ran out. Short
// enough for any std::string's inline buffer (15 characters with
// libstdc++ and libc++), so storing it never allocates.
inline constexpr char kOutOfMemory[] = "out of memory";

// Stores `message` as the thread's last error and, where given, the
// handle's. Never throws: a message there is no memory for is stored as
// kOutOfMemory.
inline void Record(std::string* handle_error,
                   absl::string_view message) noexcept {
  auto store = [message](std::string& to) noexcept {
    try {
      to.assign(message.data(), message.size());
    } catch (...) {
      to.assign(kOutOfMemory);  // within the inline buffer: no allocation
    }
  };
  store(LastError());
  if (handle_error != nullptr) store(*handle_error);
}

// Records a failure for the thread and, where given, the handle.
inline ramferry_status Fail(std::string* handle_error,
                            const absl::Status& status) noexcept {
  Record(handle_error, status.message());
  return Code(status.code());
}

// The same without an absl::Status, whose message is allocated: for the
// paths that run out of memory or must not allocate.
inline ramferry_status Fail(std::string* handle_error, absl::StatusCode code,
                            absl::string_view message) noexcept {
  Record(handle_error, message);
  return Code(code);
}

inline ramferry_status Check(std::string* handle_error,
                             const absl::Status& status) noexcept {
  return status.ok() ? RAMFERRY_OK : Fail(handle_error, status);
}

// "<what> is NULL", built in place: a NULL argument is refused even where
// nothing can be allocated.
inline ramferry_status NullArgument(const char* what) noexcept {
  char message[96];
  std::snprintf(message, sizeof message, "%s is NULL", what);
  return Fail(nullptr, absl::StatusCode::kInvalidArgument, message);
}

// Runs `fn` (which returns a ramferry_status), turning an exception into
// an error: none may cross into C. The handlers allocate nothing, so an
// exception met while out of memory is still an error, not a second
// exception.
template <typename Fn>
ramferry_status Guard(std::string* handle_error, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return Fail(handle_error, absl::StatusCode::kResourceExhausted,
                kOutOfMemory);
  } catch (const std::exception& e) {
    return Fail(handle_error, absl::StatusCode::kInternal, e.what());
  } catch (...) {
    return Fail(handle_error, absl::StatusCode::kInternal, "unknown exception");
  }
}

// Views over the caller's words, one per region: nothing is copied.
inline absl::StatusOr<std::vector<ramferry::DirtyBitmap>> Views(
    const std::vector<ramferry::Region>& regions, uint64_t* const* bitmaps,
    size_t count) {
  if (bitmaps == nullptr) return absl::InvalidArgumentError("bitmaps is NULL");
  if (count != regions.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        count, " bitmaps for ", regions.size(), " regions (one per region)"));
  }
  std::vector<ramferry::DirtyBitmap> views;
  views.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (bitmaps[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("bitmap ", i, " (region ", regions[i].id, ") is NULL"));
    }
    views.push_back(
        ramferry::DirtyBitmap::View(bitmaps[i], regions[i].page_count()));
  }
  return views;
}

inline std::vector<ramferry::DirtyBitmap*> Pointers(
    std::vector<ramferry::DirtyBitmap>& views) {
  std::vector<ramferry::DirtyBitmap*> out;
  out.reserve(views.size());
  for (ramferry::DirtyBitmap& v : views) out.push_back(&v);
  return out;
}

}  // namespace ramferry::capi

#endif  // RAMFERRY_CAPI_C_API_UTIL_H_
