// tcp: header + pages in one sendmsg; the kernel copies the pages into the
// socket, so the caller's memory is free again when the call returns.
#ifndef RAMFERRY_CHANNELS_TCP_H_
#define RAMFERRY_CHANNELS_TCP_H_

#include <memory>

#include "channels/transport.h"

namespace ramferry::channels {

// Takes ownership of the connected socket `fd`. Also the receive side of
// every socket transport: they differ only in how they send.
std::unique_ptr<Transport> OpenTcp(int fd, const TransportOptions& options);

}  // namespace ramferry::channels

#endif  // RAMFERRY_CHANNELS_TCP_H_
