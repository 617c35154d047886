// Unix stream sockets at a path, as the tools make and reach them: the
// control socket (--control), and QEMU's migration sockets (--qemu).
#ifndef RAMFERRY_TOOLS_COMMON_UNIX_SOCKET_H_
#define RAMFERRY_TOOLS_COMMON_UNIX_SOCKET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/owned_fd.h"

namespace ramferry::cli {

// A socket listening at `path`, mode 0600 from its making on, which
// replaces a stale socket there (one nobody listens on) and refuses
// anything else; `what` names it in errors ("control socket").
// `nonblocking`: accept() never waits. The caller unlinks `path`.
absl::StatusOr<base::OwnedFd> ListenUnix(const std::string& path,
                                         const std::string& what,
                                         bool nonblocking);

// A socket connected to the listener at `path`, retried while there is
// none yet (nothing at the path, or nobody listening) until `deadline`.
absl::StatusOr<base::OwnedFd> ConnectUnix(const std::string& path,
                                          const std::string& what,
                                          absl::Time deadline);

}  // namespace ramferry::cli

#endif  // RAMFERRY_TOOLS_COMMON_UNIX_SOCKET_H_
