// ramferry-migrate --qemu=PATH: carries QEMU's own live migration (its
// main connection and its multifd channels) over a ramferry session of
// streams (SessionOptions::streams; docs/qemu.md). QEMU keeps every
// decision (convergence, downtime, switchover); ramferry carries its
// bytes, sealed, over its channels and links, at --max-bandwidth.
//
//  - source: listens on the unix socket PATH, where the source QEMU
//    migrates to (`migrate uri=unix:PATH`); each connection it accepts
//    becomes a stream, opened on the destination in the order QEMU
//    connected. The session ends once every stream ended both ways: QEMU
//    closed its connections, and the destination QEMU closed its own.
//  - destination: for each stream, connects to the destination QEMU's
//    incoming socket PATH (`-incoming unix:PATH`, or `migrate-incoming`),
//    one connection each, in order, so QEMU's own matching of its main
//    and multifd channels holds.
//
// A QEMU that fails, a destination QEMU that refuses its stream, a lost
// connection or a stop signal ends the session on both ends, with the
// reason, and cuts every QEMU connection: each QEMU then fails its
// migration, and the source's guest runs on.
#ifndef RAMFERRY_TOOLS_MIGRATE_QEMU_BRIDGE_H_
#define RAMFERRY_TOOLS_MIGRATE_QEMU_BRIDGE_H_

#include <string>

#include "absl/status/status.h"
#include "ramferry/options.h"

namespace ramferry::migrate {

// What --qemu does not go with, named by flag; OK when nothing is set
// that it would ignore.
absl::Status CheckQemuFlags();

int RunQemuSource(const SessionOptions& opt, const std::string& path);
int RunQemuDest(const SessionOptions& opt, const std::string& path);

}  // namespace ramferry::migrate

#endif  // RAMFERRY_TOOLS_MIGRATE_QEMU_BRIDGE_H_
