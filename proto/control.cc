#include "proto/control.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "proto/postcopy.h"
#include "proto/stream_control.h"
#include "proto/wire.h"

namespace ramferry::proto {
namespace {

constexpr size_t kRegionEntryMaxBytes = 4 + 4 + 8 + 2 + kMaxRegionNameBytes;

size_t MaxPayload(ControlType t) {
  switch (t) {
    case ControlType::kRegionTable:
      return 4 + kMaxRegions * kRegionEntryMaxBytes;
    case ControlType::kRegionReply:
      return 1 + 2 + kMaxErrorTextBytes;
    case ControlType::kRoundDone:
      return 16;
    case ControlType::kError:
      return 4 + 2 + 2 + kMaxErrorTextBytes;
    case ControlType::kFinish:
    case ControlType::kFinishAck:
    case ControlType::kHeartbeat:
      return 0;
    case ControlType::kVerifyRequest:
      return 16;
    case ControlType::kVerifyResult:
      return 16 + 8 * size_t{kMaxVerifyPages};
    case ControlType::kChannelLost:
    case ControlType::kChannelGone:
      return 4 + 8 + 2 + 2 + kMaxErrorTextBytes;
    case ControlType::kChannelGoneAck:
      return 12;
    case ControlType::kMissingPages:
      return kMaxMissingPagesPayload;
    case ControlType::kPostcopyArmed:
    case ControlType::kPostcopyComplete:
      return 0;
    case ControlType::kPageRequest:
      return kMaxPageRequestPayload;
    case ControlType::kPageData:
      return kMaxPageDataPayload;
    case ControlType::kStreamOpen:
    case ControlType::kStreamOpened:
      return 4;
    case ControlType::kStreamBack:
      return 12 + size_t{kMaxStreamBackBytes};
    case ControlType::kStreamBackEnd:
      return 12;
    case ControlType::kStreamAck:
      return 16;
  }
  return 0;
}

// Starts a frame; Finish() patches in the payload length.
class FrameBuilder {
 public:
  explicit FrameBuilder(ControlType t) : w_(&buf_) {
    w_.U32(static_cast<uint32_t>(t));
    w_.U32(0);
  }
  WireWriter& w() { return w_; }
  std::vector<uint8_t> Finish() {
    Store32(buf_.data() + 4,
            static_cast<uint32_t>(buf_.size() - kFrameHeaderBytes));
    return std::move(buf_);
  }

 private:
  std::vector<uint8_t> buf_;
  WireWriter w_;
};

std::string Clip(absl::string_view s, size_t n) {
  return std::string(s.substr(0, n));
}

bool Printable(absl::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c >= 0x20 && c <= 0x7e; });
}

// An absl::StatusCode other than OK.
bool IsErrorCode(uint16_t code) {
  return code != 0 &&
         code <= static_cast<uint16_t>(absl::StatusCode::kUnauthenticated);
}

// A decoded text no longer than the encoder clips it to (Clip): a longer
// one would not survive a round trip. The frame bound leaves no room for
// more, but a decoder must not rely on its caller having checked the frame
// (error_message_fuzzer found one: a 2176-byte text decoded, re-encoded
// clipped, and decoded differently).
absl::Status CheckTextBound(absl::string_view text, absl::string_view what) {
  if (text.size() <= kMaxErrorTextBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s of %d bytes exceeds %d", what, text.size(), kMaxErrorTextBytes));
}

// Peer text ends up in logs and reports: no control characters.
void MakePrintable(std::string& text) {
  for (char& c : text) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
}

// A decoder's last step: every byte consumed, none missing.
absl::Status Finished(const WireReader& r, const char* what) {
  if (!r.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " truncated"));
  }
  if (r.remaining() != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has %d trailing bytes", what, r.remaining()));
  }
  return absl::OkStatus();
}

}  // namespace

const char* ControlTypeName(ControlType t) {
  switch (t) {
    case ControlType::kRegionTable:
      return "REGION_TABLE";
    case ControlType::kRegionReply:
      return "REGION_REPLY";
    case ControlType::kRoundDone:
      return "ROUND_DONE";
    case ControlType::kError:
      return "ERROR";
    case ControlType::kFinish:
      return "FINISH";
    case ControlType::kFinishAck:
      return "FINISH_ACK";
    case ControlType::kVerifyRequest:
      return "VERIFY_REQUEST";
    case ControlType::kVerifyResult:
      return "VERIFY_RESULT";
    case ControlType::kHeartbeat:
      return "HEARTBEAT";
    case ControlType::kChannelLost:
      return "CHANNEL_LOST";
    case ControlType::kChannelGone:
      return "CHANNEL_GONE";
    case ControlType::kChannelGoneAck:
      return "CHANNEL_GONE_ACK";
    case ControlType::kMissingPages:
      return "MISSING_PAGES";
    case ControlType::kPostcopyArmed:
      return "POSTCOPY_ARMED";
    case ControlType::kPageRequest:
      return "PAGE_REQUEST";
    case ControlType::kPageData:
      return "PAGE_DATA";
    case ControlType::kPostcopyComplete:
      return "POSTCOPY_COMPLETE";
    case ControlType::kStreamOpen:
      return "STREAM_OPEN";
    case ControlType::kStreamOpened:
      return "STREAM_OPENED";
    case ControlType::kStreamBack:
      return "STREAM_BACK";
    case ControlType::kStreamBackEnd:
      return "STREAM_BACK_END";
    case ControlType::kStreamAck:
      return "STREAM_ACK";
  }
  return "UNKNOWN";
}

std::vector<uint8_t> StartFrame(ControlType type) {
  std::vector<uint8_t> frame;
  WireWriter w(&frame);
  w.U32(static_cast<uint32_t>(type));
  w.U32(0);
  return frame;
}

void FinishFrame(std::vector<uint8_t>& frame) {
  Store32(frame.data() + 4,
          static_cast<uint32_t>(frame.size() - kFrameHeaderBytes));
}

absl::StatusOr<FrameHeader> DecodeFrameHeader(absl::Span<const uint8_t> in) {
  if (in.size() < kFrameHeaderBytes) {
    return absl::InvalidArgumentError("control frame header truncated");
  }
  uint32_t type = Load32(in.data());
  uint32_t length = Load32(in.data() + 4);
  if (type < static_cast<uint32_t>(ControlType::kRegionTable) ||
      type > static_cast<uint32_t>(ControlType::kStreamAck)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown control message type %d", type));
  }
  FrameHeader h{static_cast<ControlType>(type), length};
  if (length > MaxPayload(h.type)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "control message %s of %d bytes exceeds its bound of %d",
        ControlTypeName(h.type), length, MaxPayload(h.type)));
  }
  return h;
}

absl::Status ValidateRegionInfo(const RegionInfo& r) {
  if (r.page_size < kMinPageSize || r.page_size > kMaxPageSize ||
      (r.page_size & (r.page_size - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "region %d page size %d is not a power of two in [%d, %d]", r.id,
        r.page_size, kMinPageSize, kMaxPageSize));
  }
  if (r.length == 0 || r.length % r.page_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "region %d length %d is not a positive multiple of its page size %d",
        r.id, r.length, r.page_size));
  }
  if (r.name.size() > kMaxRegionNameBytes || !Printable(r.name)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "region %d name is longer than %d bytes or not printable", r.id,
        kMaxRegionNameBytes));
  }
  return absl::OkStatus();
}

std::vector<uint8_t> EncodeRegionTable(absl::Span<const RegionInfo> regions) {
  FrameBuilder f(ControlType::kRegionTable);
  f.w().U32(static_cast<uint32_t>(regions.size()));
  for (const RegionInfo& r : regions) {
    f.w().U32(r.id);
    f.w().U32(r.page_size);
    f.w().U64(r.length);
    f.w().Str16(Clip(r.name, kMaxRegionNameBytes));
  }
  return f.Finish();
}

absl::StatusOr<std::vector<RegionInfo>> DecodeRegionTable(
    absl::Span<const uint8_t> payload) {
  WireReader r(payload);
  uint32_t count = r.U32();
  if (!r.ok()) return absl::InvalidArgumentError("region table truncated");
  // None: a session of streams (kFeatureStreams); each end checks that
  // against its own table.
  if (count > kMaxRegions) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "region table has %d regions; want [0, %d]", count, kMaxRegions));
  }
  std::vector<RegionInfo> regions;
  regions.reserve(count);
  absl::flat_hash_set<uint32_t> ids;
  for (uint32_t i = 0; i < count; ++i) {
    RegionInfo info;
    info.id = r.U32();
    info.page_size = r.U32();
    info.length = r.U64();
    info.name = r.Str16();
    if (!r.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("region table truncated in entry %d", i));
    }
    RAMFERRY_RETURN_IF_ERROR(ValidateRegionInfo(info));
    if (!ids.insert(info.id).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("region table lists region id %d twice", info.id));
    }
    regions.push_back(std::move(info));
  }
  RAMFERRY_RETURN_IF_ERROR(Finished(r, "region table"));
  return regions;
}

std::vector<uint8_t> EncodeRegionReply(const RegionReply& reply) {
  FrameBuilder f(ControlType::kRegionReply);
  f.w().U8(reply.accepted ? 1 : 0);
  f.w().Str16(Clip(reply.reason, kMaxErrorTextBytes));
  return f.Finish();
}

absl::StatusOr<RegionReply> DecodeRegionReply(absl::Span<const uint8_t> p) {
  WireReader r(p);
  RegionReply reply;
  uint8_t accepted = r.U8();
  reply.reason = r.Str16();
  RAMFERRY_RETURN_IF_ERROR(Finished(r, "region reply"));
  RAMFERRY_RETURN_IF_ERROR(CheckTextBound(reply.reason, "region reply reason"));
  if (accepted > 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("region reply accepted flag is %d", accepted));
  }
  if (!Printable(reply.reason)) {
    return absl::InvalidArgumentError("region reply reason is not printable");
  }
  reply.accepted = accepted == 1;
  return reply;
}

std::vector<uint8_t> EncodeRoundDone(const RoundDone& done) {
  FrameBuilder f(ControlType::kRoundDone);
  f.w().U64(done.round);
  f.w().U64(done.pages);
  return f.Finish();
}

absl::StatusOr<RoundDone> DecodeRoundDone(absl::Span<const uint8_t> p) {
  WireReader r(p);
  RoundDone d;
  d.round = r.U64();
  d.pages = r.U64();
  RAMFERRY_RETURN_IF_ERROR(Finished(r, "round done"));
  return d;
}

std::vector<uint8_t> EncodeError(const ErrorMessage& e) {
  FrameBuilder f(ControlType::kError);
  f.w().U32(e.channel);
  f.w().U16(e.code);
  f.w().Str16(Clip(e.text, kMaxErrorTextBytes));
  return f.Finish();
}

absl::StatusOr<ErrorMessage> DecodeError(absl::Span<const uint8_t> p) {
  WireReader r(p);
  ErrorMessage e;
  e.channel = r.U32();
  e.code = r.U16();
  e.text = r.Str16();
  RAMFERRY_RETURN_IF_ERROR(Finished(r, "error message"));
  RAMFERRY_RETURN_IF_ERROR(CheckTextBound(e.text, "error message text"));
  if (!IsErrorCode(e.code)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("error message code %d is not an error code", e.code));
  }
  MakePrintable(e.text);
  return e;
}

absl::Status ErrorMessageStatus(const ErrorMessage& e) {
  std::string where = e.channel == kNoChannel
                          ? ""
                          : absl::StrFormat(" (channel %d)", e.channel);
  return absl::Status(static_cast<absl::StatusCode>(e.code),
                      absl::StrCat("peer reported", where, ": ", e.text));
}

ErrorMessage MakeErrorMessage(const absl::Status& status, uint32_t channel) {
  ErrorMessage e;
  e.channel = channel;
  e.code = static_cast<uint16_t>(status.ok() ? absl::StatusCode::kUnknown
                                             : status.code());
  e.text = Clip(status.message(), kMaxErrorTextBytes);
  return e;
}

std::vector<uint8_t> EncodeFinish() {
  return FrameBuilder(ControlType::kFinish).Finish();
}
std::vector<uint8_t> EncodeHeartbeat() {
  return FrameBuilder(ControlType::kHeartbeat).Finish();
}

std::vector<uint8_t> EncodeFinishAck() {
  return FrameBuilder(ControlType::kFinishAck).Finish();
}

absl::Status DecodeEmpty(ControlType type, absl::Span<const uint8_t> p) {
  if (!p.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s carries %d payload bytes; want 0",
                        ControlTypeName(type), p.size()));
  }
  return absl::OkStatus();
}

std::vector<uint8_t> EncodeVerifyRequest(const VerifyRequest& q) {
  FrameBuilder f(ControlType::kVerifyRequest);
  f.w().U32(q.region_id);
  f.w().U64(q.first_page);
  f.w().U32(q.page_count);
  return f.Finish();
}

absl::StatusOr<VerifyRequest> DecodeVerifyRequest(absl::Span<const uint8_t> p) {
  WireReader r(p);
  VerifyRequest q;
  q.region_id = r.U32();
  q.first_page = r.U64();
  q.page_count = r.U32();
  RAMFERRY_RETURN_IF_ERROR(Finished(r, "verify request"));
  if (q.page_count == 0 || q.page_count > kMaxVerifyPages) {
    return absl::InvalidArgumentError(
        absl::StrFormat("verify request for %d pages; want [1, %d]",
                        q.page_count, kMaxVerifyPages));
  }
  return q;
}

std::vector<uint8_t> EncodeVerifyResult(const VerifyResult& v) {
  FrameBuilder f(ControlType::kVerifyResult);
  f.w().U32(v.region_id);
  f.w().U64(v.first_page);
  f.w().U32(static_cast<uint32_t>(v.page_digests.size()));
  for (uint64_t d : v.page_digests) f.w().U64(d);
  return f.Finish();
}

absl::StatusOr<VerifyResult> DecodeVerifyResult(absl::Span<const uint8_t> p) {
  WireReader r(p);
  VerifyResult v;
  v.region_id = r.U32();
  v.first_page = r.U64();
  uint32_t n = r.U32();
  if (!r.ok() || n > kMaxVerifyPages || r.remaining() != 8 * size_t{n}) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "verify result for %d pages does not match its %d payload bytes", n,
        p.size()));
  }
  v.page_digests.resize(n);
  for (uint64_t& d : v.page_digests) d = r.U64();
  RAMFERRY_RETURN_IF_ERROR(Finished(r, "verify result"));
  return v;
}

namespace {

std::vector<uint8_t> EncodeLoss(ControlType type, const ChannelLoss& loss) {
  FrameBuilder f(type);
  f.w().U32(loss.channel);
  f.w().U64(loss.round);
  f.w().U16(loss.code);
  f.w().Str16(Clip(loss.text, kMaxErrorTextBytes));
  return f.Finish();
}

}  // namespace

std::vector<uint8_t> EncodeChannelLost(const ChannelLoss& loss) {
  return EncodeLoss(ControlType::kChannelLost, loss);
}

std::vector<uint8_t> EncodeChannelGone(const ChannelLoss& loss) {
  return EncodeLoss(ControlType::kChannelGone, loss);
}

absl::StatusOr<ChannelLoss> DecodeChannelLoss(ControlType type,
                                              absl::Span<const uint8_t> p) {
  const char* what = ControlTypeName(type);
  if (type != ControlType::kChannelLost && type != ControlType::kChannelGone) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is not a channel loss message", what));
  }
  WireReader r(p);
  ChannelLoss loss;
  loss.channel = r.U32();
  loss.round = r.U64();
  loss.code = r.U16();
  loss.text = r.Str16();
  RAMFERRY_RETURN_IF_ERROR(Finished(r, what));
  RAMFERRY_RETURN_IF_ERROR(
      CheckTextBound(loss.text, absl::StrCat(what, " text")));
  if (loss.channel == kNoChannel) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s names no channel", what));
  }
  if (!IsErrorCode(loss.code)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s cause code %d is not an error code", what, loss.code));
  }
  MakePrintable(loss.text);
  return loss;
}

std::vector<uint8_t> EncodeChannelGoneAck(const ChannelGoneAck& ack) {
  FrameBuilder f(ControlType::kChannelGoneAck);
  f.w().U32(ack.channel);
  f.w().U64(ack.round);
  return f.Finish();
}

absl::StatusOr<ChannelGoneAck> DecodeChannelGoneAck(
    absl::Span<const uint8_t> p) {
  WireReader r(p);
  ChannelGoneAck ack;
  ack.channel = r.U32();
  ack.round = r.U64();
  RAMFERRY_RETURN_IF_ERROR(Finished(r, "channel gone ack"));
  if (ack.channel == kNoChannel) {
    return absl::InvalidArgumentError("CHANNEL_GONE_ACK names no channel");
  }
  return ack;
}

absl::Status ChannelLossStatus(const ChannelLoss& loss) {
  return absl::Status(static_cast<absl::StatusCode>(loss.code), loss.text);
}

}  // namespace ramferry::proto
