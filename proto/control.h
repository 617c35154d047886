// Messages on the control connection, after the control Hello.
//
// Frame: u32 type, u32 payload length, payload (big-endian fields). Each
// type has its own payload bound, checked before the payload is read, so a
// peer cannot make the other end allocate more than that.
#ifndef RAMFERRY_PROTO_CONTROL_H_
#define RAMFERRY_PROTO_CONTROL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ramferry::proto {

inline constexpr size_t kFrameHeaderBytes = 8;
inline constexpr uint32_t kMaxRegions = 1024;
inline constexpr size_t kMaxRegionNameBytes = 255;
inline constexpr size_t kMaxErrorTextBytes = 2048;
inline constexpr uint32_t kMinPageSize = 512;
inline constexpr uint32_t kMaxPageSize = 1u << 30;
inline constexpr uint32_t kNoChannel = 0xffffffffu;

enum class ControlType : uint32_t {
  kRegionTable = 1,    // source -> destination
  kRegionReply = 2,    // destination -> source
  kRoundDone = 3,      // destination -> source
  kError = 4,          // either way; ends the session
  kFinish = 5,         // source -> destination: no more rounds
  kFinishAck = 6,      // destination -> source
  kVerifyRequest = 7,  // source -> destination
  kVerifyResult = 8,   // destination -> source
  // Either way, every stall_timeout/4: proof of life while a peer has
  // nothing else to say, so a stopped peer is told from an idle one.
  kHeartbeat = 9,
  // Only with kFeatureSurviveChannelLoss:
  kChannelLost = 10,     // destination -> source: a data channel died here
  kChannelGone = 11,     // source -> destination: stop waiting for it
  kChannelGoneAck = 12,  // destination -> source: it is gone, from round r
  // Only with kFeaturePostcopy (proto/postcopy.h has the payloads):
  kMissingPages = 13,      // source -> destination: the switch
  kPostcopyArmed = 14,     // destination -> source: missing pages now fault
  kPageRequest = 15,       // destination -> source: pages threads wait on
  kPageData = 16,          // source -> destination: requested pages
  kPostcopyComplete = 17,  // destination -> source: every page is here
  // Only with kFeatureStreams (proto/stream_control.h has the payloads):
  kStreamOpen = 18,     // source -> destination: connect stream s's peer
  kStreamOpened = 19,   // destination -> source: its peer is connected
  kStreamBack = 20,     // destination -> source: bytes its peer sent back
  kStreamBackEnd = 21,  // destination -> source: its peer closed its side
  kStreamAck = 22,      // destination -> source: delivered up to here
};

struct FrameHeader {
  ControlType type;
  uint32_t length;
};

// Validates the type and the payload bound for that type.
absl::StatusOr<FrameHeader> DecodeFrameHeader(absl::Span<const uint8_t> in);

struct RegionInfo {
  uint32_t id = 0;
  uint32_t page_size = 0;
  uint64_t length = 0;
  std::string name;
  bool operator==(const RegionInfo&) const = default;
};

// Shape rules every region obeys, on both ends: page size a power of two in
// [kMinPageSize, kMaxPageSize], length a positive multiple of it, name
// printable and bounded.
absl::Status ValidateRegionInfo(const RegionInfo& region);

struct RoundDone {
  uint64_t round = 0;
  uint64_t pages = 0;  // pages the destination applied in this round
};

struct ErrorMessage {
  uint32_t channel = kNoChannel;
  uint16_t code = 0;  // absl::StatusCode
  std::string text;
};

struct RegionReply {
  bool accepted = false;
  std::string reason;
};

// Digests of a run of pages, asked for in pieces of at most
// kMaxVerifyPages so no message grows with the region.
inline constexpr uint32_t kMaxVerifyPages = 65536;

struct VerifyRequest {
  uint32_t region_id = 0;
  uint64_t first_page = 0;
  uint32_t page_count = 0;
};

struct VerifyResult {
  uint32_t region_id = 0;
  uint64_t first_page = 0;
  std::vector<uint64_t> page_digests;
};

// A data channel that died while the session goes on. As CHANNEL_LOST the
// destination reports that its end of the channel failed (`round`: the
// round that channel was in); as CHANNEL_GONE the source declares the
// channel gone (`round`: the oldest round the destination has not
// confirmed), having stopped its own end. `code`/`text` give the cause.
struct ChannelLoss {
  uint32_t channel = 0;
  uint64_t round = 0;
  uint16_t code = 0;  // absl::StatusCode, not OK
  std::string text;
};

// The destination's answer to CHANNEL_GONE: the channel's receive thread
// has stopped, and from round `round` on the round barrier no longer waits
// for it. `round` is the declared round, or the next one when the
// destination completed the declared round (with the channel's SYNC)
// before the declaration arrived.
struct ChannelGoneAck {
  uint32_t channel = 0;
  uint64_t round = 0;
};

// A frame of `type` whose payload the caller appends to the returned
// buffer; FinishFrame then fills in the payload length.
std::vector<uint8_t> StartFrame(ControlType type);
void FinishFrame(std::vector<uint8_t>& frame);

// Each Encode returns a whole frame, header included.
std::vector<uint8_t> EncodeRegionTable(absl::Span<const RegionInfo> regions);
std::vector<uint8_t> EncodeRegionReply(const RegionReply& reply);
std::vector<uint8_t> EncodeRoundDone(const RoundDone& done);
std::vector<uint8_t> EncodeError(const ErrorMessage& error);
std::vector<uint8_t> EncodeFinish();
std::vector<uint8_t> EncodeFinishAck();
std::vector<uint8_t> EncodeHeartbeat();
std::vector<uint8_t> EncodeVerifyRequest(const VerifyRequest& request);
std::vector<uint8_t> EncodeVerifyResult(const VerifyResult& result);
std::vector<uint8_t> EncodeChannelLost(const ChannelLoss& loss);
std::vector<uint8_t> EncodeChannelGone(const ChannelLoss& loss);
std::vector<uint8_t> EncodeChannelGoneAck(const ChannelGoneAck& ack);

// Each Decode takes the payload of a frame of its type.
absl::StatusOr<std::vector<RegionInfo>> DecodeRegionTable(
    absl::Span<const uint8_t> payload);
absl::StatusOr<RegionReply> DecodeRegionReply(absl::Span<const uint8_t> p);
absl::StatusOr<RoundDone> DecodeRoundDone(absl::Span<const uint8_t> p);
absl::StatusOr<ErrorMessage> DecodeError(absl::Span<const uint8_t> p);
absl::Status DecodeEmpty(ControlType type, absl::Span<const uint8_t> p);
absl::StatusOr<VerifyRequest> DecodeVerifyRequest(absl::Span<const uint8_t> p);
absl::StatusOr<VerifyResult> DecodeVerifyResult(absl::Span<const uint8_t> p);
// CHANNEL_LOST and CHANNEL_GONE share a layout. The channel index is
// checked against the session by the caller (the decoder does not know
// the channel count); kNoChannel is rejected here.
absl::StatusOr<ChannelLoss> DecodeChannelLoss(ControlType type,
                                              absl::Span<const uint8_t> p);
absl::StatusOr<ChannelGoneAck> DecodeChannelGoneAck(
    absl::Span<const uint8_t> p);
// The cause a ChannelLoss carries, as a status.
absl::Status ChannelLossStatus(const ChannelLoss& loss);

// The error a peer's ErrorMessage stands for, naming its channel.
absl::Status ErrorMessageStatus(const ErrorMessage& error);
// The message that carries `status` to the peer.
ErrorMessage MakeErrorMessage(const absl::Status& status,
                              uint32_t channel = kNoChannel);

const char* ControlTypeName(ControlType type);

}  // namespace ramferry::proto

#endif  // RAMFERRY_PROTO_CONTROL_H_
