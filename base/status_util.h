#ifndef RAMFERRY_BASE_STATUS_UTIL_H_
#define RAMFERRY_BASE_STATUS_UTIL_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ramferry::base {

// "context: message", same code: says where an error happened.
inline absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

// How long a side that saw an echo waits for the peer's ERROR.
inline constexpr absl::Duration kRootCauseGrace = absl::Milliseconds(500);

// A failure that is typically the consequence of the peer's failure (its
// sockets closed, or our own teardown interrupting a call), not a cause.
inline bool IsEcho(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsAborted(s);
}

// The status to report when the peer said `peer` and this side saw
// `local` (no word of the peer's itself): the peer's word wins over a
// local echo of it.
inline absl::Status PreferRootCause(const absl::Status& local,
                                    const absl::Status& peer) {
  if (peer.ok() || !IsEcho(local)) return local;
  return absl::Status(
      peer.code(),
      absl::StrCat(peer.message(), " (here: ", local.message(), ")"));
}

}  // namespace ramferry::base

#endif  // RAMFERRY_BASE_STATUS_UTIL_H_
