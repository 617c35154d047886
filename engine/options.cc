#include "ramferry/options.h"

#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "base/named_enum.h"
#include "base/page_size.h"
#include "base/status_macros.h"
#include "channels/transport_family.h"
#include "engine/channel_sender.h"
#include "engine/option_rules.h"
#include "engine/stream_seal.h"
#include "proto/auth.h"
#include "proto/handshake.h"
#include "proto/packet.h"

namespace ramferry {

// The public page size and the one post-copy and the hand-off fix are one
// number under two names (base/page_size.h says why).
static_assert(kPageSize == base::kSmallPageSize);

namespace {

absl::Status CheckProtection(const SessionOptions& o, uint32_t caps) {
  if (o.protect != Protection::kMac && o.protect != Protection::kEncrypt) {
    return absl::OkStatus();
  }
  if (o.auth_key.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "protect = %s needs a key: the stream's keys are derived from it",
        ProtectionName(o.protect)));
  }
  if ((caps & channels::kCapRemotePlacement) != 0) {
    return absl::UnimplementedError(absl::StrFormat(
        "protect = %s is not available on %s: it places pages in the "
        "destination's memory itself, where no tag can be checked first. "
        "Use protect = none (the connections are still authenticated) on a "
        "fabric you trust",
        ProtectionName(o.protect), TransportKindName(o.transport)));
  }
  return absl::OkStatus();
}

absl::Status CheckEndpoints(const SessionOptions& o) {
  for (size_t i = 0; i < o.channel_endpoints.size(); ++i) {
    if (o.channel_endpoints[i].host.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "channel_endpoints[%d] has no host: give each data channel "
          "endpoint an address of the destination",
          i));
    }
  }
  if (o.channel_endpoints.size() > o.channels) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "channel_endpoints names %d endpoints for %d channels: the last "
        "%d would carry nothing; give at least as many channels",
        o.channel_endpoints.size(), o.channels,
        o.channel_endpoints.size() - o.channels));
  }
  return absl::OkStatus();
}

// A rule for the integer field kField, whatever its type.
template <auto kField>
constexpr engine::NumericOptionRule Rule(const char* name, int64_t min,
                                         int64_t max, bool power_of_two = false,
                                         const char* why = "") {
  return {
      name,
      min,
      max,
      power_of_two,
      why,
      [](const SessionOptions& o) { return static_cast<int64_t>(o.*kField); },
      [](SessionOptions& o, int64_t v) {
        o.*kField = static_cast<std::decay_t<decltype(o.*kField)>>(v);
      }};
}

constexpr engine::NumericOptionRule kNumericRules[] = {
    Rule<&SessionOptions::channels>("channels", 1, proto::kMaxChannels),
    Rule<&SessionOptions::max_channels>("max_channels", 1, proto::kMaxChannels),
    Rule<&SessionOptions::packet_pages>("packet_pages", 1,
                                        proto::kMaxPacketPagesLimit),
    Rule<&SessionOptions::max_packet_pages>("max_packet_pages", 1,
                                            proto::kMaxPacketPagesLimit),
    Rule<&SessionOptions::header_slots>("header_slots", 1, 1 << 20),
    Rule<&SessionOptions::ring_entries>("ring_entries", 2, 1 << 20, true),
    Rule<&SessionOptions::rdma_chunk_bytes>("rdma_chunk_bytes",
                                            proto::kMinRdmaChunkBytes,
                                            proto::kMaxRdmaChunkBytes, true),
    // What a QP's inline data may be asked for (rxe offers 256, mlx5
    // about 1 KiB); past a page nothing is worth sending inline.
    Rule<&SessionOptions::rdma_max_inline>("rdma_max_inline", 0, 4096),
    // zstd's range, less its "ultra" levels (which need large windows)
    // and the negative levels past -100 (no faster than storing).
    Rule<&SessionOptions::compression_level>("compression_level", -100, 19,
                                             false, " (zstd's levels)"),
    // A cache under a packet's pages could not hold one packet's copies;
    // past 1 TiB is no host's memory.
    Rule<&SessionOptions::delta_cache_bytes>("delta_cache_bytes", 1 << 20,
                                             int64_t{1} << 40),
};

}  // namespace

namespace engine {

absl::Span<const NumericOptionRule> NumericOptionRules() {
  return kNumericRules;
}

const NumericOptionRule* FindNumericOptionRule(absl::string_view name) {
  const std::string field = absl::StrReplaceAll(name, {{"-", "_"}});
  for (const NumericOptionRule& rule : kNumericRules) {
    if (field == rule.name) return &rule;
  }
  return nullptr;
}

absl::Status CheckNumericOption(const NumericOptionRule& rule, int64_t value) {
  const bool in_range = value >= rule.min && value <= rule.max;
  if (in_range && (!rule.power_of_two || (value & (value - 1)) == 0)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("%s = %d; want %s[%d, %d]%s", rule.name, value,
                      rule.power_of_two ? "a power of two in " : "", rule.min,
                      rule.max, rule.why));
}

}  // namespace engine

namespace {

constexpr base::EnumName<Protection> kProtectionNames[] = {
    {Protection::kAuto, "auto"},
    {Protection::kNone, "none"},
    {Protection::kMac, "mac"},
    {Protection::kEncrypt, "encrypt"},
};
constexpr base::EnumName<Compression> kCompressionNames[] = {
    {Compression::kOff, "off"},
    {Compression::kOn, "on"},
    {Compression::kAuto, "auto"},
};
constexpr base::EnumName<Delta> kDeltaNames[] = {
    {Delta::kOff, "off"},
    {Delta::kOn, "on"},
    {Delta::kAuto, "auto"},
};
constexpr base::EnumName<VerifyMode> kVerifyModeNames[] = {
    {VerifyMode::kFull, "full"},
    {VerifyMode::kSent, "sent"},
    {VerifyMode::kReread, "reread"},
};

}  // namespace

const char* ProtectionName(Protection p) {
  return base::NameOf(kProtectionNames, p);
}
absl::StatusOr<Protection> ParseProtection(absl::string_view text) {
  return base::ParseName(kProtectionNames, "protection", text);
}
const char* CompressionName(Compression compression) {
  return base::NameOf(kCompressionNames, compression);
}
absl::StatusOr<Compression> ParseCompression(absl::string_view text) {
  return base::ParseName(kCompressionNames, "compression", text);
}
const char* DeltaName(Delta delta) { return base::NameOf(kDeltaNames, delta); }
absl::StatusOr<Delta> ParseDelta(absl::string_view text) {
  return base::ParseName(kDeltaNames, "delta", text);
}
const char* VerifyModeName(VerifyMode mode) {
  return base::NameOf(kVerifyModeNames, mode);
}
absl::StatusOr<VerifyMode> ParseVerifyMode(absl::string_view text) {
  return base::ParseName(kVerifyModeNames, "verify mode", text);
}

namespace {

// The format is a FormatSpec, not forwarded as-is: clang checks
// StrFormat's format string at compile time and refuses one that reached
// it through a forwarding parameter (gcc does not check, so only the clang
// builds, like the fuzz build, failed).
template <typename... Args>
absl::Status Bad(const absl::FormatSpec<Args...>& format, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrFormat(format, args...));
}

// Each field on its own: the transport, the numbers, the timeouts, the
// host and the channel endpoints.
absl::Status CheckFields(const SessionOptions& o) {
  if (channels::FindTransportFamily(o.transport) == nullptr) {
    return Bad("transport = %d; not a transport this build has",
               static_cast<int>(o.transport));
  }
  for (const engine::NumericOptionRule& rule : kNumericRules) {
    RAMFERRY_RETURN_IF_ERROR(engine::CheckNumericOption(rule, rule.get(o)));
  }
  for (auto [name, d] : {std::pair{"connect_timeout", o.connect_timeout},
                         std::pair{"handshake_timeout", o.handshake_timeout},
                         std::pair{"stall_timeout", o.stall_timeout},
                         std::pair{"round_timeout", o.round_timeout}}) {
    if (d <= absl::ZeroDuration()) {
      return Bad("%s = %s; want > 0", name, absl::FormatDuration(d));
    }
  }
  if (o.host.empty()) return Bad("host is empty");
  return CheckEndpoints(o);
}

// The key, or the explicit choice to go without one, and what the
// transport's channels can do with it.
absl::Status CheckKey(const SessionOptions& o, uint32_t caps) {
  if (o.auth_key.empty() && !o.insecure) {
    return absl::FailedPreconditionError(
        "no key: give both ends the same pre-shared key (auth_key, "
        "--key-file), or ask for an unauthenticated session explicitly "
        "(insecure, --insecure) on a network you trust");
  }
  RAMFERRY_RETURN_IF_ERROR(CheckProtection(o, caps));
  if (o.auth_key.empty()) return absl::OkStatus();
  RAMFERRY_RETURN_IF_ERROR(proto::ValidateAuthKey(o.auth_key));
  // Fail closed: a family whose channels cannot prove the key would
  // carry it for nothing. (Every family this build has can.)
  if ((caps & channels::kCapAuthenticatedHello) == 0) {
    return absl::UnimplementedError(absl::StrFormat(
        "authentication is not available on %s channels yet; use a tcp "
        "transport with a key, or %s without one on a trusted fabric",
        TransportKindName(o.transport), TransportKindName(o.transport)));
  }
  return absl::OkStatus();
}

// Options that cannot go together, or not over this transport.
absl::Status CheckCombinations(const SessionOptions& o, uint32_t caps) {
  const bool remote_placement = (caps & channels::kCapRemotePlacement) != 0;
  if (o.delta == Delta::kOn && remote_placement) {
    return Bad(
        "delta = on with transport %s, which places pages in the "
        "destination's memory itself, where nothing applies a delta; use "
        "tcp, tcp-zerocopy or uring-zc, or delta = auto (off there)",
        TransportKindName(o.transport));
  }
  if (o.survive_channel_loss && o.single_thread) {
    return Bad(
        "survive_channel_loss needs channel threads: turn off single_thread");
  }
  if (!o.postcopy) return absl::OkStatus();
  if (remote_placement) {
    return Bad(
        "postcopy with transport %s, which places pages in the "
        "destination's memory past userfaultfd; use tcp, tcp-zerocopy or "
        "uring-zc",
        TransportKindName(o.transport));
  }
  if (o.survive_channel_loss) {
    return Bad(
        "postcopy does not survive channel loss yet: turn off one "
        "of postcopy and survive_channel_loss");
  }
  // kReread would hash memory the destination's workload has written
  // since; kSent's table misses the pages that went on the urgent
  // channel. kFull compares what landed with this side's memory, which
  // post-copy keeps unchanged.
  if (o.verify != VerifyMode::kFull) {
    return Bad(
        "postcopy verifies with verify = full only (the "
        "destination's workload writes its memory before Verify)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateOptions(const SessionOptions& o) {
  RAMFERRY_RETURN_IF_ERROR(CheckFields(o));
  const uint32_t caps = channels::StaticCapabilities(o.transport);
  RAMFERRY_RETURN_IF_ERROR(CheckKey(o, caps));
  return CheckCombinations(o, caps);
}

Protection ResolvedProtection(const SessionOptions& o) {
  switch (engine::SealModeFor(o, channels::StaticCapabilities(o.transport))) {
    case proto::SealMode::kNone:
      return Protection::kNone;
    case proto::SealMode::kMac:
      return Protection::kMac;
    case proto::SealMode::kEncrypt:
      return Protection::kEncrypt;
  }
  return Protection::kNone;
}

bool TransportAuthenticates(TransportKind kind) {
  return (channels::StaticCapabilities(kind) &
          channels::kCapAuthenticatedHello) != 0;
}

namespace {

absl::Status ValidateStreamSession(const SessionOptions& o,
                                   absl::Span<const Region> regions) {
  if (!regions.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "streams = true with %d regions: a session carries streams or "
        "pages, not both; register no regions",
        regions.size()));
  }
  if ((channels::StaticCapabilities(o.transport) &
       channels::kCapRemotePlacement) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "streams = true over %s: its channels place bytes in registered "
        "memory, and a stream has none; use tcp, tcp-zerocopy or uring-zc",
        TransportKindName(o.transport)));
  }
  const char* other = o.postcopy               ? "postcopy"
                      : o.delta != Delta::kOff ? "delta"
                      : o.single_thread        ? "single_thread"
                                               : nullptr;
  if (other != nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "streams = true with %s: a stream session does not take it yet; "
        "turn it off",
        other));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSession(const SessionOptions& o,
                             absl::Span<const Region> regions) {
  RAMFERRY_RETURN_IF_ERROR(ValidateOptions(o));
  if (o.streams) return ValidateStreamSession(o, regions);
  const bool sealed =
      engine::SealModeFor(o, channels::StaticCapabilities(o.transport)) !=
      proto::SealMode::kNone;
  for (const Region& r : regions) {
    if (o.postcopy && r.page_size != kPageSize) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "region %d has %d-byte pages; post-copy places 4 KiB pages only "
          "(huge pages are not supported yet): track the region in 4 KiB "
          "pages, or turn post-copy off",
          r.id, r.page_size));
    }
    if (sealed && r.page_size > engine::kMaxStagedPayloadBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "region %d has %d-byte pages: a protected stream seals a copy of "
          "each packet, of at most %d bytes, and one page is more; track "
          "the region in smaller pages (2 MiB memory may be tracked in 2 MiB "
          "or smaller pages), or set protect = none on a trusted network",
          r.id, r.page_size, engine::kMaxStagedPayloadBytes));
    }
  }
  return absl::OkStatus();
}

}  // namespace ramferry
