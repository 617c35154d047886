// One way to turn an errno into a status: the message says what was being
// done, what the errno means and its number; the code fits the errno, so a
// caller can tell a peer that went away (UNAVAILABLE) from a timeout, a
// shortage or a refusal without reading the message.
#ifndef RAMFERRY_BASE_ERRNO_STATUS_H_
#define RAMFERRY_BASE_ERRNO_STATUS_H_

#include <errno.h>
#include <string.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace ramferry::base {

// "what: strerror (errno N)".
inline std::string ErrnoMessage(int err, absl::string_view what) {
  return absl::StrFormat("%s: %s (errno %d)", what, strerrordesc_np(err), err);
}

// ErrnoMessage with a status code that fits the errno.
inline absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string msg = ErrnoMessage(err, what);
  switch (err) {
    case ECONNRESET:
    case EPIPE:
    case ECONNREFUSED:
    case ECONNABORTED:
    case ENOTCONN:
    case EHOSTUNREACH:
    case ENETUNREACH:
      return absl::UnavailableError(msg);
    case ETIMEDOUT:
    case EAGAIN:
      return absl::DeadlineExceededError(msg);
    case ENOBUFS:
    case ENOMEM:
      return absl::ResourceExhaustedError(msg);
    case EINVAL:
    case EFAULT:
      return absl::InvalidArgumentError(msg);
    case EPERM:
    case EACCES:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace ramferry::base

#endif  // RAMFERRY_BASE_ERRNO_STATUS_H_
