#include "ramferry/pinning.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "channels/rdma/rdma.h"
#include "channels/transport_family.h"
#include "proto/packet.h"

namespace ramferry {
namespace {

// A queued zero-copy notification is an skb with no data: its truesize
// (struct sk_buff + skb_shared_info, cache-aligned) is 576 bytes on
// x86_64; round up for other builds.
constexpr uint64_t kNotificationBytes = 768;
constexpr int kCapIpcLock = 14;

uint64_t ReadTcpWmemMax() {
  std::ifstream f("/proc/sys/net/ipv4/tcp_wmem");
  uint64_t lo = 0, def = 0, hi = 0;
  if (f >> lo >> def >> hi) return hi;
  return 4 << 20;  // the kernel's default
}

uint64_t ReadOptmemMax() {
  std::ifstream f("/proc/sys/net/core/optmem_max");
  uint64_t v = 0;
  if (f >> v) return v;
  return 20480;  // the smallest default kernels shipped
}

std::string FormatMiB(uint64_t bytes) {
  return absl::StrFormat("%.1fMiB", bytes / double(1 << 20));
}

bool HaveCapIpcLock() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      uint64_t caps = std::stoull(line.substr(7), nullptr, 16);
      return (caps >> kCapIpcLock) & 1;
    }
  }
  return false;
}

}  // namespace

PinningNeeds ComputePinningNeeds(const SessionOptions& o, uint64_t page_size,
                                 uint64_t sndbuf_max, uint64_t region_bytes) {
  PinningNeeds n;
  const uint32_t caps = channels::StaticCapabilities(o.transport);
  if ((caps & channels::kCapRemotePlacement) != 0) {
    // The channels of a session share one protection domain on each end,
    // so the regions are registered (and charged) once (pin-all at once,
    // on demand as chunks are first sent: the same at the end of a full
    // round). Each channel registers its own buffers besides: the source
    // its header slots, either end its receive buffers (one packet header
    // or control message each); counted on both ends alike, an upper
    // bound for either.
    const uint64_t header = proto::PacketHeaderBytes(o.packet_pages);
    const uint64_t slots = uint64_t{o.header_slots} * header;
    const uint64_t receives = channels::RdmaChannelBufferBytes(header);
    n.memlock_bytes = region_bytes + (slots + receives) * o.channels;
    n.explanation = absl::StrFormat(
        "%s of regions registered once (the channels share a protection "
        "domain) + %d channels x (%s of header slots + %s of receive "
        "buffers)",
        FormatMiB(region_bytes), o.channels, FormatMiB(slots),
        FormatMiB(receives));
    return n;
  }
  const uint64_t packet = uint64_t{o.packet_pages} * page_size;
  const uint64_t by_slots = uint64_t{o.header_slots} * packet;
  const uint64_t per_channel = std::min(by_slots, sndbuf_max);
  n.memlock_bytes = per_channel * o.channels;
  n.sends_in_flight = (per_channel + packet - 1) / packet;
  // Every send in flight holds one notification skb; completed ones merge
  // into ranges, but allow one more per channel for the range being read.
  n.optmem_bytes = (n.sends_in_flight + 1) * kNotificationBytes;
  n.explanation = absl::StrFormat(
      "%d channels x min(%d header slots x %s packets, %s socket send "
      "buffer) = %s pinned; %d sends in flight per socket x %d bytes of "
      "notification",
      o.channels, o.header_slots, FormatMiB(packet), FormatMiB(sndbuf_max),
      FormatMiB(n.memlock_bytes), n.sends_in_flight, kNotificationBytes);
  if (o.registered_buffers && (caps & channels::kCapRegisteredBuffers) != 0) {
    // Fixed buffers are pinned for the ring's life, once per channel.
    n.memlock_bytes += region_bytes * o.channels;
    absl::StrAppendFormat(&n.explanation,
                          "; + %d channels x %s of regions registered as "
                          "fixed buffers",
                          o.channels, FormatMiB(region_bytes));
  }
  return n;
}

PinningNeeds EstimatePinning(const SessionOptions& o, uint64_t page_size,
                             uint64_t region_bytes) {
  return ComputePinningNeeds(o, page_size, ReadTcpWmemMax(), region_bytes);
}

absl::Status CheckPinningLimits(const SessionOptions& o, uint64_t page_size,
                                uint64_t region_bytes) {
  const uint32_t caps = channels::StaticCapabilities(o.transport);
  if ((caps & (channels::kCapPinsSendMemory | channels::kCapRemotePlacement)) ==
      0) {
    return absl::OkStatus();
  }
  const PinningNeeds need = EstimatePinning(o, page_size, region_bytes);
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  if (!HaveCapIpcLock() && lim.rlim_cur != RLIM_INFINITY &&
      lim.rlim_cur < need.memlock_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s can pin %d bytes (%s) but RLIMIT_MEMLOCK is %d bytes. Raise it "
        "to at least %d KiB (ulimit -l %d, or LimitMEMLOCK= in a systemd "
        "unit), run with CAP_IPC_LOCK, use fewer channels or header slots, "
        "or use the tcp transport (transport, --transport=tcp)",
        TransportKindName(o.transport), need.memlock_bytes, need.explanation,
        lim.rlim_cur, (need.memlock_bytes + 1023) / 1024,
        (need.memlock_bytes + 1023) / 1024));
  }
  // Only socket zero-copy sends hold notifications.
  if (need.sends_in_flight == 0) return absl::OkStatus();
  const uint64_t optmem = ReadOptmemMax();
  if (optmem < need.optmem_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s can hold %d bytes of zero-copy notifications per socket (%s) but "
        "net.core.optmem_max is %d. Raise it: sysctl -w "
        "net.core.optmem_max=%d",
        TransportKindName(o.transport), need.optmem_bytes, need.explanation,
        optmem, need.optmem_bytes));
  }
  return absl::OkStatus();
}

}  // namespace ramferry
