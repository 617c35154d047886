// Control-connection messages: frame header bounds, every message's round
// trip and rejections, plus a randomized robustness pass over every proto
// decoder (packet, handshake, control) that ASan watches for overreads.
#include "proto/control.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/handshake.h"
#include "proto/packet.h"
#include "proto/wire.h"
#include "tests/support/status_matchers.h"

namespace ramferry::proto {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// The payload of an encoded frame, after checking its header.
std::vector<uint8_t> Payload(const std::vector<uint8_t>& frame,
                             ControlType want) {
  EXPECT_GE(frame.size(), kFrameHeaderBytes);
  auto h = DecodeFrameHeader(frame);
  EXPECT_OK(h);
  if (!h.ok()) return {};
  EXPECT_EQ(h->type, want);
  EXPECT_EQ(h->length, frame.size() - kFrameHeaderBytes);
  return std::vector<uint8_t>(frame.begin() + kFrameHeaderBytes, frame.end());
}

std::vector<uint8_t> FrameHeaderBytes(uint32_t type, uint32_t length) {
  std::vector<uint8_t> b(8);
  Store32(b.data(), type);
  Store32(b.data() + 4, length);
  return b;
}

// ---- frame header ----

TEST(FrameHeaderTest, RejectsTruncated) {
  std::vector<uint8_t> b = FrameHeaderBytes(1, 0);
  absl::Status s = DecodeFrameHeader(absl::MakeConstSpan(b).first(7)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("truncated"));
}

TEST(FrameHeaderTest, RejectsUnknownType) {
  for (uint32_t t : {0u, 23u, 0x100u, 0xFFFFFFFFu}) {
    absl::Status s = DecodeFrameHeader(FrameHeaderBytes(t, 0)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << t;
    EXPECT_THAT(s.message(), HasSubstr("type " + std::to_string(t)));
  }
}

TEST(FrameHeaderTest, EnforcesEachTypesBound) {
  struct Case {
    ControlType type;
    uint32_t bound;
    const char* name;
  };
  const Case cases[] = {
      {ControlType::kRegionTable, 4 + 1024 * (4 + 4 + 8 + 2 + 255),
       "REGION_TABLE"},
      {ControlType::kRegionReply, 1 + 2 + 2048, "REGION_REPLY"},
      {ControlType::kRoundDone, 16, "ROUND_DONE"},
      {ControlType::kError, 4 + 2 + 2 + 2048, "ERROR"},
      {ControlType::kFinish, 0, "FINISH"},
      {ControlType::kFinishAck, 0, "FINISH_ACK"},
      {ControlType::kVerifyRequest, 16, "VERIFY_REQUEST"},
      {ControlType::kVerifyResult, 16 + 8 * 65536, "VERIFY_RESULT"},
      {ControlType::kHeartbeat, 0, "HEARTBEAT"},
      {ControlType::kChannelLost, 4 + 8 + 2 + 2 + 2048, "CHANNEL_LOST"},
      {ControlType::kChannelGone, 4 + 8 + 2 + 2 + 2048, "CHANNEL_GONE"},
      {ControlType::kChannelGoneAck, 12, "CHANNEL_GONE_ACK"},
  };
  for (const Case& c : cases) {
    const uint32_t t = static_cast<uint32_t>(c.type);
    EXPECT_STREQ(ControlTypeName(c.type), c.name);
    auto ok = DecodeFrameHeader(FrameHeaderBytes(t, c.bound));
    ASSERT_OK(ok) << c.name;
    EXPECT_EQ(ok->type, c.type);
    EXPECT_EQ(ok->length, c.bound);
    for (uint32_t len : {c.bound + 1, 0xFFFFFFFFu}) {
      absl::Status s = DecodeFrameHeader(FrameHeaderBytes(t, len)).status();
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
          << c.name << " " << len;
      EXPECT_THAT(s.message(),
                  AllOf(HasSubstr(c.name), HasSubstr(std::to_string(len)),
                        HasSubstr("bound of " + std::to_string(c.bound))));
    }
  }
  EXPECT_STREQ(ControlTypeName(static_cast<ControlType>(99)), "UNKNOWN");
}

// ---- region table ----

std::vector<RegionInfo> SomeRegions() {
  return {
      {1, 4096, 4096 * 100, "heap"},
      {7, 512, 512, ""},
      {0xFFFFFFFF, 1u << 30, uint64_t{1} << 40, std::string(255, 'n')},
      {42, 2u << 20, 6u << 20, "huge pages ~!"},
  };
}

TEST(RegionTableTest, RoundTrip) {
  std::vector<RegionInfo> regions = SomeRegions();
  std::vector<uint8_t> frame = EncodeRegionTable(regions);
  std::vector<uint8_t> payload = Payload(frame, ControlType::kRegionTable);
  EXPECT_EQ(Load32(payload.data()), 4u);
  auto got = DecodeRegionTable(payload);
  ASSERT_OK(got);
  EXPECT_EQ(*got, regions);
}

// Builds a table payload by hand, so invalid fields reach the decoder.
class TableBuilder {
 public:
  explicit TableBuilder(uint32_t count) : w_(&buf_) { w_.U32(count); }
  TableBuilder& Entry(uint32_t id, uint32_t page_size, uint64_t length,
                      const std::string& name) {
    w_.U32(id);
    w_.U32(page_size);
    w_.U64(length);
    w_.U16(static_cast<uint16_t>(name.size()));
    w_.Bytes(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(name.data()),
                                 name.size()));
    return *this;
  }
  std::vector<uint8_t> bytes() const { return buf_; }

 private:
  std::vector<uint8_t> buf_;
  WireWriter w_;
};

absl::Status DecodeTable(const std::vector<uint8_t>& p) {
  return DecodeRegionTable(p).status();
}

// No regions is a session of streams (kFeatureStreams): each end checks
// that against its own table (RegionTable::Matches).
TEST(RegionTableTest, TakesNoRegionsAndRefusesOverMax) {
  absl::StatusOr<std::vector<RegionInfo>> none =
      DecodeRegionTable(TableBuilder(0).bytes());
  ASSERT_OK(none);
  EXPECT_TRUE(none->empty());
  absl::Status s = DecodeTable(TableBuilder(kMaxRegions + 1).bytes());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("1025 regions"), HasSubstr("[0, 1024]")));
  s = DecodeTable(TableBuilder(0xFFFFFFFF).bytes());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("4294967295 regions"));
}

TEST(RegionTableTest, AcceptsMaxRegions) {
  std::vector<RegionInfo> regions;
  for (uint32_t i = 0; i < kMaxRegions; ++i) {
    regions.push_back({i, 4096, 4096, "r" + std::to_string(i)});
  }
  std::vector<uint8_t> frame = EncodeRegionTable(regions);
  auto got = DecodeRegionTable(Payload(frame, ControlType::kRegionTable));
  ASSERT_OK(got);
  EXPECT_EQ(*got, regions);
}

TEST(RegionTableTest, RejectsDuplicateIds) {
  absl::Status s = DecodeTable(TableBuilder(3)
                                   .Entry(5, 4096, 4096, "a")
                                   .Entry(6, 4096, 4096, "b")
                                   .Entry(5, 4096, 8192, "c")
                                   .bytes());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("region id 5"), HasSubstr("twice")));
}

TEST(RegionTableTest, RejectsBadPageSize) {
  for (uint32_t ps : {0u, 256u, 4095u, 4097u, 3u << 10, (1u << 30) + 512,
                      1u << 31, 0xFFFFFFFFu}) {
    absl::Status s =
        DecodeTable(TableBuilder(1).Entry(9, ps, 4096ull * 4096, "x").bytes());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << ps;
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("region 9"),
                      HasSubstr("page size " + std::to_string(ps))));
  }
  EXPECT_OK(DecodeTable(TableBuilder(1).Entry(9, 512, 1024, "x").bytes()));
}

TEST(RegionTableTest, RejectsLengthNotMultipleOfPageSize) {
  for (uint64_t len : {uint64_t{0}, uint64_t{4095}, uint64_t{4097},
                       uint64_t{4096} * 3 + 512, ~uint64_t{0}}) {
    absl::Status s =
        DecodeTable(TableBuilder(1).Entry(11, 4096, len, "x").bytes());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << len;
    EXPECT_THAT(s.message(), AllOf(HasSubstr("region 11"),
                                   HasSubstr("length " + std::to_string(len)),
                                   HasSubstr("4096")));
  }
}

TEST(RegionTableTest, RejectsLongOrNonPrintableName) {
  absl::Status s = DecodeTable(
      TableBuilder(1).Entry(12, 4096, 4096, std::string(256, 'a')).bytes());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("region 12"), HasSubstr("name")));
  for (std::string bad :
       {std::string("a\nb"), std::string("\x7f"), std::string("tab\there"),
        std::string("\x80x"), std::string(1, '\0')}) {
    s = DecodeTable(TableBuilder(1).Entry(13, 4096, 4096, bad).bytes());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("region 13"), HasSubstr("name")));
  }
  // Exactly 255 printable bytes is fine.
  EXPECT_OK(DecodeTable(
      TableBuilder(1).Entry(12, 4096, 4096, std::string(255, '~')).bytes()));
}

TEST(RegionTableTest, EncoderClipsLongNames) {
  std::vector<RegionInfo> regions = {{1, 4096, 4096, std::string(300, 'k')}};
  auto got = DecodeRegionTable(
      Payload(EncodeRegionTable(regions), ControlType::kRegionTable));
  ASSERT_OK(got);
  EXPECT_EQ((*got)[0].name, std::string(255, 'k'));
}

TEST(RegionTableTest, RejectsTrailingBytes) {
  std::vector<uint8_t> p = TableBuilder(1).Entry(1, 4096, 4096, "a").bytes();
  p.push_back(0);
  p.push_back(0);
  absl::Status s = DecodeTable(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("region table"), HasSubstr("2 trailing bytes")));
}

TEST(RegionTableTest, RejectsEveryTruncation) {
  std::vector<uint8_t> p = TableBuilder(2)
                               .Entry(1, 4096, 4096, "alpha")
                               .Entry(2, 4096, 8192, "beta")
                               .bytes();
  ASSERT_OK(DecodeTable(p));
  for (size_t n = 0; n < p.size(); ++n) {
    std::vector<uint8_t> cut(p.begin(), p.begin() + n);
    absl::Status s = DecodeTable(cut);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(s.message(), HasSubstr("truncated")) << n;
  }
  // The second entry names itself.
  std::vector<uint8_t> cut(p.begin(), p.end() - 1);
  EXPECT_THAT(DecodeTable(cut).message(), HasSubstr("entry 1"));
}

TEST(RegionInfoTest, ValidateRegionInfo) {
  EXPECT_OK(ValidateRegionInfo({1, 4096, 8192, "ok"}));
  EXPECT_EQ(ValidateRegionInfo({1, 1000, 8000, "ok"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateRegionInfo({1, 4096, 0, "ok"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateRegionInfo({1, 4096, 4096, "\x01"}).code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- other messages ----

TEST(RegionReplyTest, RoundTrip) {
  for (const RegionReply& r :
       {RegionReply{true, ""}, RegionReply{false, "region 3 is too small"}}) {
    auto got = DecodeRegionReply(
        Payload(EncodeRegionReply(r), ControlType::kRegionReply));
    ASSERT_OK(got);
    EXPECT_EQ(got->accepted, r.accepted);
    EXPECT_EQ(got->reason, r.reason);
  }
  // Reasons are clipped to kMaxErrorTextBytes, and still fit the bound.
  RegionReply big{false, std::string(5000, 'r')};
  std::vector<uint8_t> frame = EncodeRegionReply(big);
  auto got = DecodeRegionReply(Payload(frame, ControlType::kRegionReply));
  ASSERT_OK(got);
  EXPECT_EQ(got->reason.size(), kMaxErrorTextBytes);
}

TEST(RegionReplyTest, Rejects) {
  std::vector<uint8_t> p =
      Payload(EncodeRegionReply({true, "fine"}), ControlType::kRegionReply);
  {
    std::vector<uint8_t> b = p;
    b[0] = 2;
    absl::Status s = DecodeRegionReply(b).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("accepted flag is 2"));
  }
  {
    std::vector<uint8_t> b = p;
    b.back() = '\n';
    absl::Status s = DecodeRegionReply(b).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("not printable"));
  }
  {
    std::vector<uint8_t> b(p.begin(), p.end() - 1);
    absl::Status s = DecodeRegionReply(b).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("region reply"), HasSubstr("truncated")));
  }
  {
    std::vector<uint8_t> b = p;
    b.push_back('x');
    absl::Status s = DecodeRegionReply(b).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("1 trailing bytes"));
  }
}

// A payload whose reason is longer than any encoder writes: the frame bound
// keeps it off the control connection, and the decoder refuses it on its own
// (it used to accept it, so decode(encode(decode(x))) != decode(x)).
TEST(RegionReplyTest, RejectsReasonLongerThanBound) {
  std::vector<uint8_t> p;
  WireWriter w(&p);
  w.U8(0);
  w.Str16(std::string(kMaxErrorTextBytes + 1, 'r'));
  absl::Status s = DecodeRegionReply(p).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("reason of 2049 bytes exceeds 2048"));
  // The longest reason the encoder writes still decodes.
  p.clear();
  w.U8(0);
  w.Str16(std::string(kMaxErrorTextBytes, 'r'));
  EXPECT_OK(DecodeRegionReply(p));
}

TEST(RoundDoneTest, RoundTripAndRejects) {
  RoundDone d{0x0102030405060708ull, ~uint64_t{0}};
  std::vector<uint8_t> p = Payload(EncodeRoundDone(d), ControlType::kRoundDone);
  ASSERT_EQ(p.size(), 16u);
  EXPECT_EQ(p[0], 0x01);
  EXPECT_EQ(p[7], 0x08);
  auto got = DecodeRoundDone(p);
  ASSERT_OK(got);
  EXPECT_EQ(got->round, d.round);
  EXPECT_EQ(got->pages, d.pages);

  absl::Status s = DecodeRoundDone(absl::MakeConstSpan(p).first(15)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("round done"), HasSubstr("truncated")));
  p.push_back(0);
  s = DecodeRoundDone(p).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("trailing"));
}

TEST(ErrorTest, RoundTrip) {
  ErrorMessage e;
  e.channel = 3;
  e.code = static_cast<uint16_t>(absl::StatusCode::kDataLoss);
  e.text = "page 12 checksum mismatch";
  auto got = DecodeError(Payload(EncodeError(e), ControlType::kError));
  ASSERT_OK(got);
  EXPECT_EQ(got->channel, 3u);
  EXPECT_EQ(got->code, e.code);
  EXPECT_EQ(got->text, e.text);
  absl::Status st = ErrorMessageStatus(*got);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("channel 3"),
                                  HasSubstr("page 12 checksum mismatch")));

  ErrorMessage m = MakeErrorMessage(absl::UnavailableError("gone"));
  EXPECT_EQ(m.channel, kNoChannel);
  EXPECT_EQ(m.code, static_cast<uint16_t>(absl::StatusCode::kUnavailable));
  auto got2 = DecodeError(Payload(EncodeError(m), ControlType::kError));
  ASSERT_OK(got2);
  EXPECT_EQ(got2->channel, kNoChannel);
  EXPECT_THAT(ErrorMessageStatus(*got2).message(),
              AllOf(HasSubstr("gone"), ::testing::Not(HasSubstr("channel"))));
  // An OK status still travels as an error.
  EXPECT_EQ(MakeErrorMessage(absl::OkStatus()).code,
            static_cast<uint16_t>(absl::StatusCode::kUnknown));
  // Long texts are clipped to the bound.
  ErrorMessage big =
      MakeErrorMessage(absl::InternalError(std::string(4000, 'e')));
  EXPECT_EQ(big.text.size(), kMaxErrorTextBytes);
  std::vector<uint8_t> frame = EncodeError(big);
  EXPECT_OK(DecodeFrameHeader(frame));
}

TEST(ErrorTest, NonPrintableTextReplaced) {
  ErrorMessage e;
  e.code = 13;
  e.text = "a\x1b[31mb\xc3";
  auto got = DecodeError(Payload(EncodeError(e), ControlType::kError));
  ASSERT_OK(got);
  EXPECT_EQ(got->text, "a?[31mb?");
}

TEST(ErrorTest, RejectsCodeZeroOrUnknown) {
  for (uint16_t code : {uint16_t{0}, uint16_t{17}, uint16_t{0xFFFF}}) {
    ErrorMessage e;
    e.code = code;
    e.text = "x";
    absl::Status s =
        DecodeError(Payload(EncodeError(e), ControlType::kError)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << code;
    EXPECT_THAT(s.message(), HasSubstr("code " + std::to_string(code)));
  }
  ErrorMessage e;
  e.code = 2;
  std::vector<uint8_t> p = Payload(EncodeError(e), ControlType::kError);
  p.pop_back();
  EXPECT_THAT(DecodeError(p).status().message(),
              AllOf(HasSubstr("error message"), HasSubstr("truncated")));
}

// Found by error_message_fuzzer (tests/fuzz/regressions/error_message/):
// a 2176-byte text was accepted, came back clipped to 2048 from the encoder,
// and so decoded differently the second time.
TEST(ErrorTest, RejectsTextLongerThanBound) {
  std::vector<uint8_t> p;
  WireWriter w(&p);
  w.U32(kNoChannel);
  w.U16(static_cast<uint16_t>(absl::StatusCode::kInternal));
  w.Str16(std::string(kMaxErrorTextBytes + 1, 'e'));
  absl::Status s = DecodeError(p).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("text of 2049 bytes exceeds 2048"));
  // The longest text the encoder writes still decodes.
  ErrorMessage e = MakeErrorMessage(
      absl::InternalError(std::string(kMaxErrorTextBytes, 'e')));
  auto got = DecodeError(Payload(EncodeError(e), ControlType::kError));
  ASSERT_OK(got);
  EXPECT_EQ(got->text.size(), kMaxErrorTextBytes);
}

TEST(EmptyTest, FinishAndAck) {
  std::vector<uint8_t> f = EncodeFinish();
  EXPECT_EQ(f, FrameHeaderBytes(5, 0));
  EXPECT_OK(
      DecodeEmpty(ControlType::kFinish, Payload(f, ControlType::kFinish)));
  std::vector<uint8_t> a = EncodeFinishAck();
  EXPECT_EQ(a, FrameHeaderBytes(6, 0));
  EXPECT_OK(DecodeEmpty(ControlType::kFinishAck, {}));
}

TEST(EmptyTest, RejectsPayload) {
  std::vector<uint8_t> p = {0, 1, 2};
  absl::Status s = DecodeEmpty(ControlType::kFinishAck, p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("FINISH_ACK"), HasSubstr("3 payload")));
}

TEST(VerifyRequestTest, RoundTripAndRejects) {
  VerifyRequest q{17, 0x0102030405060708ull, kMaxVerifyPages};
  std::vector<uint8_t> p =
      Payload(EncodeVerifyRequest(q), ControlType::kVerifyRequest);
  ASSERT_EQ(p.size(), 16u);
  auto got = DecodeVerifyRequest(p);
  ASSERT_OK(got);
  EXPECT_EQ(got->region_id, 17u);
  EXPECT_EQ(got->first_page, q.first_page);
  EXPECT_EQ(got->page_count, kMaxVerifyPages);

  for (uint32_t n : {0u, kMaxVerifyPages + 1, 0xFFFFFFFFu}) {
    VerifyRequest bad = q;
    bad.page_count = n;
    absl::Status s = DecodeVerifyRequest(Payload(EncodeVerifyRequest(bad),
                                                 ControlType::kVerifyRequest))
                         .status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(s.message(), AllOf(HasSubstr(std::to_string(n) + " pages"),
                                   HasSubstr("65536")));
  }
  absl::Status s =
      DecodeVerifyRequest(absl::MakeConstSpan(p).first(12)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("truncated"));
}

TEST(VerifyResultTest, RoundTrip) {
  VerifyResult v;
  v.region_id = 4;
  v.first_page = 1000;
  v.page_digests = {1, ~uint64_t{0}, 0x1234567890abcdefull};
  auto got = DecodeVerifyResult(
      Payload(EncodeVerifyResult(v), ControlType::kVerifyResult));
  ASSERT_OK(got);
  EXPECT_EQ(got->region_id, 4u);
  EXPECT_EQ(got->first_page, 1000u);
  EXPECT_EQ(got->page_digests, v.page_digests);

  VerifyResult empty;
  auto got0 = DecodeVerifyResult(
      Payload(EncodeVerifyResult(empty), ControlType::kVerifyResult));
  ASSERT_OK(got0);
  EXPECT_TRUE(got0->page_digests.empty());

  VerifyResult full;
  full.page_digests.assign(kMaxVerifyPages, 7);
  std::vector<uint8_t> frame = EncodeVerifyResult(full);
  auto gotf = DecodeVerifyResult(Payload(frame, ControlType::kVerifyResult));
  ASSERT_OK(gotf);
  EXPECT_EQ(gotf->page_digests.size(), kMaxVerifyPages);
}

TEST(VerifyResultTest, RejectsCountNotMatchingPayload) {
  VerifyResult v;
  v.page_digests = {1, 2, 3};
  std::vector<uint8_t> p =
      Payload(EncodeVerifyResult(v), ControlType::kVerifyResult);
  ASSERT_EQ(p.size(), 16u + 24u);
  for (uint32_t n : {0u, 2u, 4u, kMaxVerifyPages + 1, 0xFFFFFFFFu}) {
    std::vector<uint8_t> b = p;
    Store32(b.data() + 12, n);
    absl::Status s = DecodeVerifyResult(b).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(s.message(), AllOf(HasSubstr(std::to_string(n) + " pages"),
                                   HasSubstr("40 payload bytes")));
  }
  // A partial digest.
  std::vector<uint8_t> b(p.begin(), p.end() - 1);
  EXPECT_EQ(DecodeVerifyResult(b).status().code(),
            absl::StatusCode::kInvalidArgument);
  b.assign(p.begin(), p.begin() + 10);
  EXPECT_EQ(DecodeVerifyResult(b).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChannelLossTest, LostAndGoneRoundTrip) {
  ChannelLoss loss{3, 0x0102030405060708ull,
                   static_cast<uint16_t>(absl::StatusCode::kUnavailable),
                   "recvmsg: Connection reset by peer (errno 104)"};
  for (ControlType type :
       {ControlType::kChannelLost, ControlType::kChannelGone}) {
    std::vector<uint8_t> frame = type == ControlType::kChannelLost
                                     ? EncodeChannelLost(loss)
                                     : EncodeChannelGone(loss);
    std::vector<uint8_t> p = Payload(frame, type);
    ASSERT_EQ(p.size(), 4 + 8 + 2 + 2 + loss.text.size());
    EXPECT_EQ(Load32(p.data()), 3u);
    auto got = DecodeChannelLoss(type, p);
    ASSERT_OK(got);
    EXPECT_EQ(got->channel, 3u);
    EXPECT_EQ(got->round, loss.round);
    EXPECT_EQ(got->code, loss.code);
    EXPECT_EQ(got->text, loss.text);
    absl::Status cause = ChannelLossStatus(*got);
    EXPECT_TRUE(absl::IsUnavailable(cause)) << cause;
    EXPECT_EQ(cause.message(), loss.text);
  }
  // Long texts are clipped, so the frame stays inside its bound.
  loss.text = std::string(5000, 'x');
  std::vector<uint8_t> frame = EncodeChannelGone(loss);
  auto h = DecodeFrameHeader(frame);
  ASSERT_OK(h);
  auto got = DecodeChannelLoss(ControlType::kChannelGone,
                               Payload(frame, ControlType::kChannelGone));
  ASSERT_OK(got);
  EXPECT_EQ(got->text.size(), kMaxErrorTextBytes);
}

TEST(ChannelLossTest, RejectsBadFields) {
  ChannelLoss loss{1, 2, 14, "gone"};
  // No channel.
  ChannelLoss none = loss;
  none.channel = kNoChannel;
  absl::Status s = DecodeChannelLoss(ControlType::kChannelGone,
                                     Payload(EncodeChannelGone(none),
                                             ControlType::kChannelGone))
                       .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("CHANNEL_GONE"), HasSubstr("no channel")));
  // A cause must be an error code.
  for (uint16_t code : {uint16_t{0}, uint16_t{17}, uint16_t{0xFFFF}}) {
    ChannelLoss bad = loss;
    bad.code = code;
    s = DecodeChannelLoss(
            ControlType::kChannelLost,
            Payload(EncodeChannelLost(bad), ControlType::kChannelLost))
            .status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << code;
    EXPECT_THAT(s.message(), AllOf(HasSubstr("CHANNEL_LOST"),
                                   HasSubstr("code " + std::to_string(code))));
  }
  // Truncated and trailing bytes.
  std::vector<uint8_t> p =
      Payload(EncodeChannelLost(loss), ControlType::kChannelLost);
  for (size_t n : {size_t{0}, size_t{4}, size_t{12}, p.size() - 1}) {
    s = DecodeChannelLoss(ControlType::kChannelLost,
                          absl::MakeConstSpan(p).first(n))
            .status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(s.message(), HasSubstr("truncated")) << n;
  }
  std::vector<uint8_t> longer = p;
  longer.push_back(0);
  s = DecodeChannelLoss(ControlType::kChannelLost, longer).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("1 trailing bytes"));
  // Only the two loss types share this decoder.
  s = DecodeChannelLoss(ControlType::kError, p).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not a channel loss message"));
  // Control characters from the peer do not reach logs.
  ChannelLoss odd = loss;
  odd.text = "a\x1b[2Jb\n";
  auto got = DecodeChannelLoss(
      ControlType::kChannelLost,
      Payload(EncodeChannelLost(odd), ControlType::kChannelLost));
  ASSERT_OK(got);
  EXPECT_EQ(got->text, "a?[2Jb?");
}

TEST(ChannelLossTest, GoneAckRoundTripAndRejects) {
  ChannelGoneAck ack{7, 123456789012345ull};
  std::vector<uint8_t> p =
      Payload(EncodeChannelGoneAck(ack), ControlType::kChannelGoneAck);
  ASSERT_EQ(p.size(), 12u);
  auto got = DecodeChannelGoneAck(p);
  ASSERT_OK(got);
  EXPECT_EQ(got->channel, 7u);
  EXPECT_EQ(got->round, ack.round);

  absl::Status s =
      DecodeChannelGoneAck(absl::MakeConstSpan(p).first(11)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("truncated"));
  std::vector<uint8_t> longer = p;
  longer.push_back(1);
  s = DecodeChannelGoneAck(longer).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("trailing"));
  s = DecodeChannelGoneAck(Payload(EncodeChannelGoneAck({kNoChannel, 1}),
                                   ControlType::kChannelGoneAck))
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no channel"));
}

// ---- randomized robustness ----

// Valid encodings of every kind, for mutation.
std::vector<std::vector<uint8_t>> Corpus() {
  std::vector<std::vector<uint8_t>> c;
  PacketHeader h;
  h.channel = 2;
  h.page_count = 3;
  h.region_id = 1;
  h.page_size = 4096;
  std::vector<uint64_t> offs = {0, 4096, 8192};
  std::vector<uint8_t> pkt(PacketHeaderBytes(3));
  EncodePacketHeader(h, offs, absl::MakeSpan(pkt));
  c.push_back(pkt);
  PacketHeader sync;
  sync.flags = kPacketSync;
  sync.channel = 2;
  std::vector<uint8_t> sp(64);
  EncodePacketHeader(sync, {}, absl::MakeSpan(sp));
  c.push_back(sp);

  Hello hello;
  hello.role = Role::kData;
  hello.session.bytes[3] = 9;
  hello.channel_count = 4;
  hello.channel_index = 1;
  hello.max_packet_pages = 128;
  std::vector<uint8_t> hb(kHelloBytes);
  EncodeHello(hello, absl::MakeSpan(hb));
  c.push_back(hb);
  HelloReply reply;
  reply.status = 9;
  reply.reason = "no";
  std::vector<uint8_t> rb(kHelloReplyBytes);
  EncodeHelloReply(reply, absl::MakeSpan(rb));
  c.push_back(rb);

  c.push_back(EncodeRegionTable(SomeRegions()));
  c.push_back(EncodeRegionReply({false, "why"}));
  c.push_back(EncodeRoundDone({5, 6}));
  c.push_back(EncodeError({1, 3, "bad"}));
  c.push_back(EncodeFinish());
  c.push_back(EncodeVerifyRequest({1, 2, 3}));
  VerifyResult v;
  v.page_digests = {1, 2};
  c.push_back(EncodeVerifyResult(v));
  c.push_back(EncodeChannelLost({2, 9, 14, "reset"}));
  c.push_back(EncodeChannelGone({1, 3, 4, "stalled"}));
  c.push_back(EncodeChannelGoneAck({1, 4}));
  // Payloads alone too, so control decoders see well-formed starts.
  size_t n = c.size();
  for (size_t i = 4; i < n; ++i) {
    c.emplace_back(c[i].begin() + kFrameHeaderBytes, c[i].end());
  }
  return c;
}

// A decoder may refuse, but only with an input error, never a crash.
void ExpectOkOrInputError(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  EXPECT_TRUE(s.code() == absl::StatusCode::kInvalidArgument ||
              s.code() == absl::StatusCode::kOutOfRange ||
              s.code() == absl::StatusCode::kFailedPrecondition)
      << what << ": " << s;
  EXPECT_FALSE(s.message().empty()) << what;
}

// Every decoder on `in`. `in` is sized exactly, so ASan flags overreads.
void FeedAll(const std::vector<uint8_t>& in, std::mt19937_64& rng) {
  absl::Span<const uint8_t> s(in);
  {
    uint32_t channel = in.size() >= 12 ? Load32(in.data() + 8) : 0;
    uint32_t max_pages = (rng() & 1) ? kMaxPacketPagesLimit : 4;
    auto h = DecodePacketFixed(
        s, channel, max_pages,
        {.next_header_size = (rng() & 1) != 0, .zero_pages = (rng() & 1) != 0});
    ExpectOkOrInputError(h.status(), "DecodePacketFixed");
    if (h.ok()) {
      // Canonical: re-encoding reproduces the fixed bytes.
      std::vector<uint8_t> again(PacketHeaderBytes(0));
      PacketHeader fixed = *h;
      fixed.page_count = 0;
      EncodePacketHeader(fixed, {}, absl::MakeSpan(again));
      Store32(again.data() + 12, h->page_count);
      EXPECT_TRUE(std::equal(again.begin(), again.end(), in.begin()));
      if (h->is_data()) {
        // Offsets: the raw bytes after the fixed part, exactly sized.
        std::vector<uint8_t> raw(in.begin() + kPacketFixedBytes, in.end());
        std::vector<uint64_t> out(h->page_count);
        PacketHeader ph = *h;
        // The caller matched page_size to a region: a power of two.
        ph.page_size = 1u << (9 + rng() % 8);
        uint64_t region_len = ph.page_size * (rng() % 64);
        ExpectOkOrInputError(
            DecodePageOffsets(ph, raw, region_len, (rng() & 1) != 0,
                              absl::MakeSpan(out)),
            "DecodePageOffsets");
      }
    }
  }
  {
    auto h = DecodeHello(s);
    ExpectOkOrInputError(h.status(), "DecodeHello");
    if (h.ok()) {
      std::vector<uint8_t> again(kHelloBytes);
      EncodeHello(*h, absl::MakeSpan(again));
      EXPECT_TRUE(std::equal(again.begin(), again.end(), in.begin()));
    }
  }
  {
    auto r = DecodeHelloReply(s);
    ExpectOkOrInputError(r.status(), "DecodeHelloReply");
    if (r.ok()) {
      EXPECT_LE(r->reason.size(), kHelloReasonBytes);
      for (char c : r->reason) EXPECT_TRUE(c >= 0x20 && c <= 0x7e);
      EXPECT_LE(r->status, 16);
    }
  }
  {
    auto f = DecodeFrameHeader(s);
    ExpectOkOrInputError(f.status(), "DecodeFrameHeader");
  }
  ExpectOkOrInputError(DecodeRegionTable(s).status(), "DecodeRegionTable");
  ExpectOkOrInputError(DecodeRegionReply(s).status(), "DecodeRegionReply");
  ExpectOkOrInputError(DecodeRoundDone(s).status(), "DecodeRoundDone");
  {
    auto e = DecodeError(s);
    ExpectOkOrInputError(e.status(), "DecodeError");
    if (e.ok()) {
      EXPECT_NE(e->code, 0);
      for (char c : e->text) EXPECT_TRUE(c >= 0x20 && c <= 0x7e);
    }
  }
  ExpectOkOrInputError(DecodeEmpty(ControlType::kFinish, s), "DecodeEmpty");
  {
    auto q = DecodeVerifyRequest(s);
    ExpectOkOrInputError(q.status(), "DecodeVerifyRequest");
    if (q.ok()) {
      EXPECT_GE(q->page_count, 1u);
      EXPECT_LE(q->page_count, kMaxVerifyPages);
    }
  }
  {
    auto v = DecodeVerifyResult(s);
    ExpectOkOrInputError(v.status(), "DecodeVerifyResult");
    if (v.ok()) {
      EXPECT_EQ(16 + 8 * v->page_digests.size(), in.size());
    }
  }
  for (ControlType type :
       {ControlType::kChannelLost, ControlType::kChannelGone}) {
    auto l = DecodeChannelLoss(type, s);
    ExpectOkOrInputError(l.status(), "DecodeChannelLoss");
    if (l.ok()) {
      EXPECT_NE(l->code, 0);
      EXPECT_NE(l->channel, kNoChannel);
      for (char c : l->text) EXPECT_TRUE(c >= 0x20 && c <= 0x7e);
    }
  }
  ExpectOkOrInputError(DecodeChannelGoneAck(s).status(),
                       "DecodeChannelGoneAck");
  {
    auto t = DecodeRegionTable(s);
    if (t.ok()) {
      for (const RegionInfo& r : *t) EXPECT_OK(ValidateRegionInfo(r));
    }
  }
  // A frame: header, then the payload given to its own decoder.
  auto f = DecodeFrameHeader(s);
  if (f.ok() && in.size() - kFrameHeaderBytes >= f->length) {
    std::vector<uint8_t> payload(in.begin() + kFrameHeaderBytes,
                                 in.begin() + kFrameHeaderBytes + f->length);
    absl::Span<const uint8_t> p(payload);
    absl::Status st;
    switch (f->type) {
      case ControlType::kRegionTable:
        st = DecodeRegionTable(p).status();
        break;
      case ControlType::kRegionReply:
        st = DecodeRegionReply(p).status();
        break;
      case ControlType::kRoundDone:
        st = DecodeRoundDone(p).status();
        break;
      case ControlType::kError:
        st = DecodeError(p).status();
        break;
      case ControlType::kFinish:
      case ControlType::kFinishAck:
      case ControlType::kHeartbeat:
        st = DecodeEmpty(f->type, p);
        break;
      case ControlType::kVerifyRequest:
        st = DecodeVerifyRequest(p).status();
        break;
      case ControlType::kVerifyResult:
        st = DecodeVerifyResult(p).status();
        break;
      case ControlType::kChannelLost:
      case ControlType::kChannelGone:
        st = DecodeChannelLoss(f->type, p).status();
        break;
      case ControlType::kChannelGoneAck:
        st = DecodeChannelGoneAck(p).status();
        break;
    }
    ExpectOkOrInputError(st, ControlTypeName(f->type));
  }
}

std::vector<uint8_t> Mutate(std::vector<uint8_t> b, std::mt19937_64& rng) {
  static constexpr uint8_t kInteresting[] = {0x00, 0x01, 0x7f, 0x80,
                                             0xff, 0x10, 0x20, 0x40};
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (!b.empty()) b[rng() % b.size()] ^= uint8_t(1u << (rng() % 8));
        break;
      case 1:  // an interesting byte
        if (!b.empty()) {
          b[rng() % b.size()] = kInteresting[rng() % sizeof kInteresting];
        }
        break;
      case 2:  // truncate
        if (!b.empty()) b.resize(rng() % b.size());
        break;
      case 3:  // extend
        for (int i = static_cast<int>(rng() % 16); i > 0; --i) {
          b.push_back(static_cast<uint8_t>(rng()));
        }
        break;
      case 4:  // a random big-endian u32 at a 4-aligned spot (counts, lengths)
        if (b.size() >= 4) {
          size_t at = (rng() % (b.size() / 4)) * 4;
          uint32_t v = (rng() & 1) ? static_cast<uint32_t>(rng() % 300)
                                   : static_cast<uint32_t>(rng());
          Store32(b.data() + at, v);
        }
        break;
      case 5:  // random byte
        if (!b.empty()) b[rng() % b.size()] = static_cast<uint8_t>(rng());
        break;
    }
  }
  return b;
}

TEST(ProtoRobustnessTest, RandomAndMutatedInputsNeverCrash) {
  constexpr uint64_t kSeed = 0x5eed5eed;
  std::mt19937_64 rng(kSeed);
  const std::vector<std::vector<uint8_t>> corpus = Corpus();
  size_t accepted_somewhere = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> in;
    if (i % 4 == 0) {
      in.resize(rng() % 200);
      for (uint8_t& x : in) x = static_cast<uint8_t>(rng());
    } else {
      in = Mutate(corpus[rng() % corpus.size()], rng);
    }
    // Exact capacity, so a read past size() lands outside the allocation.
    std::vector<uint8_t> exact(in.begin(), in.end());
    exact.shrink_to_fit();
    SCOPED_TRACE("iteration " + std::to_string(i) + " seed " +
                 std::to_string(kSeed));
    FeedAll(exact, rng);
    if (::testing::Test::HasFailure()) break;
    if (DecodeHello(exact).ok() || DecodeRegionTable(exact).ok() ||
        DecodePacketFixed(exact, exact.size() >= 12 ? Load32(&exact[8]) : 0,
                          kMaxPacketPagesLimit,
                          {.next_header_size = true, .zero_pages = true})
            .ok()) {
      ++accepted_somewhere;
    }
  }
  // The mutations are gentle enough that some inputs stay valid: the
  // decoders' success paths ran too.
  EXPECT_GT(accepted_somewhere, 100u);
}

}  // namespace
}  // namespace ramferry::proto
