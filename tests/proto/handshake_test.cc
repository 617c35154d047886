// Hello / HelloReply: round trips, wire layout, and every field a decoder
// must refuse.
#include "proto/handshake.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/auth.h"
#include "proto/packet.h"
#include "proto/wire.h"
#include "tests/support/status_matchers.h"

namespace ramferry::proto {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Hello ValidHello() {
  Hello h;
  h.role = Role::kData;
  for (int i = 0; i < 16; ++i) h.session.bytes[i] = static_cast<uint8_t>(i + 1);
  h.channel_index = 3;
  h.channel_count = 4;
  h.capabilities = kFeatureVerify | (1ull << 40);
  h.max_packet_pages = 256;
  h.transport = 2;
  return h;
}

std::vector<uint8_t> EncodeH(const Hello& h) {
  std::vector<uint8_t> buf(kHelloBytes, 0xAB);
  EncodeHello(h, absl::MakeSpan(buf));
  return buf;
}

std::vector<uint8_t> EncodeR(const HelloReply& r) {
  std::vector<uint8_t> buf(kHelloReplyBytes, 0xAB);
  EncodeHelloReply(r, absl::MakeSpan(buf));
  return buf;
}

TEST(HelloTest, RoundTrip) {
  Hello h = ValidHello();
  std::vector<uint8_t> buf = EncodeH(h);
  auto got = DecodeHello(buf);
  ASSERT_OK(got);
  EXPECT_EQ(got->role, Role::kData);
  EXPECT_EQ(got->session, h.session);
  EXPECT_EQ(got->channel_index, 3u);
  EXPECT_EQ(got->channel_count, 4u);
  EXPECT_EQ(got->capabilities, h.capabilities);
  EXPECT_EQ(got->max_packet_pages, 256u);
  EXPECT_EQ(got->transport, 2u);

  Hello c = ValidHello();
  c.role = Role::kControl;
  c.channel_index = 0;
  c.channel_count = kMaxChannels;
  c.max_packet_pages = kMaxPacketPagesLimit;
  auto got2 = DecodeHello(EncodeH(c));
  ASSERT_OK(got2);
  EXPECT_EQ(got2->role, Role::kControl);
  EXPECT_EQ(got2->channel_count, kMaxChannels);
  EXPECT_EQ(got2->max_packet_pages, kMaxPacketPagesLimit);
}

TEST(HelloTest, Layout) {
  std::vector<uint8_t> buf = EncodeH(ValidHello());
  EXPECT_EQ(std::string(buf.begin(), buf.begin() + 4), "RFHS");
  EXPECT_EQ(Load16(buf.data() + 4), kProtocolVersion);
  EXPECT_EQ(buf[6], 0);
  EXPECT_EQ(buf[7], 2);  // role data
  EXPECT_EQ(buf[8], 1);
  EXPECT_EQ(buf[23], 16);
  EXPECT_EQ(Load32(buf.data() + 24), 3u);
  EXPECT_EQ(Load32(buf.data() + 28), 4u);
  EXPECT_EQ(Load64(buf.data() + 32), ValidHello().capabilities);
  EXPECT_EQ(Load32(buf.data() + 40), 256u);
  EXPECT_EQ(Load16(buf.data() + 44), 2u);
  // Reserved fields zeroed over the 0xAB fill.
  for (int i = 46; i < 56; ++i) EXPECT_EQ(buf[i], 0) << i;
}

TEST(HelloTest, SessionIdHex) {
  SessionId id;
  id.bytes[0] = 0xAB;
  id.bytes[15] = 0x01;
  EXPECT_EQ(id.ToHex(), "ab000000000000000000000000000001");
  EXPECT_FALSE(id.is_zero());
  EXPECT_TRUE(SessionId{}.is_zero());
}

TEST(HelloTest, RejectsTruncated) {
  std::vector<uint8_t> buf = EncodeH(ValidHello());
  for (size_t n : {size_t{0}, size_t{4}, size_t{55}}) {
    absl::Status s = DecodeHello(absl::MakeConstSpan(buf).first(n)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(s.message(), AllOf(HasSubstr("truncated"),
                                   HasSubstr(std::to_string(n) + " of 56")));
  }
}

TEST(HelloTest, RejectsBadMagic) {
  std::vector<uint8_t> buf = EncodeH(ValidHello());
  buf[0] = 'G';  // "GFHS"
  absl::Status s = DecodeHello(buf).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("magic"), HasSubstr("0x47464853")));
  // A HelloReply's magic is not a Hello's.
  Store32(buf.data(), kHelloReplyMagic);
  EXPECT_EQ(DecodeHello(buf).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HelloTest, RejectsBadVersionAsFailedPrecondition) {
  for (uint16_t v :
       {uint16_t{0}, uint16_t(kProtocolVersion + 1), uint16_t{0xFFFF}}) {
    std::vector<uint8_t> buf = EncodeH(ValidHello());
    Store16(buf.data() + 4, v);
    absl::Status s = DecodeHello(buf).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << v;
    EXPECT_THAT(s.message(), HasSubstr("version " + std::to_string(v)));
  }
}

TEST(HelloTest, RejectsBadRole) {
  for (uint16_t role : {uint16_t{0}, uint16_t{4}, uint16_t{0x0102}}) {
    std::vector<uint8_t> buf = EncodeH(ValidHello());
    Store16(buf.data() + 6, role);
    absl::Status s = DecodeHello(buf).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << role;
    EXPECT_THAT(s.message(), HasSubstr("role " + std::to_string(role)));
  }
}

TEST(HelloTest, RejectsZeroSessionId) {
  Hello h = ValidHello();
  h.session = SessionId{};
  absl::Status s = DecodeHello(EncodeH(h)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("session id"));
  // One nonzero byte anywhere is enough.
  h.session.bytes[15] = 1;
  EXPECT_OK(DecodeHello(EncodeH(h)));
}

TEST(HelloTest, RejectsChannelCountOutOfRange) {
  for (uint32_t count : {0u, kMaxChannels + 1, 0xFFFFFFFFu}) {
    Hello h = ValidHello();
    h.channel_index = 0;
    h.channel_count = count;
    absl::Status s = DecodeHello(EncodeH(h)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << count;
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("channel count " + std::to_string(count)),
                      HasSubstr("256")));
  }
}

TEST(HelloTest, RejectsIndexNotBelowCount) {
  for (uint32_t index : {4u, 5u, 0xFFFFFFFFu}) {
    Hello h = ValidHello();
    h.channel_index = index;
    h.channel_count = 4;
    absl::Status s = DecodeHello(EncodeH(h)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << index;
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("channel index " + std::to_string(index)),
                      HasSubstr("count 4")));
  }
}

TEST(HelloTest, RejectsMaxPacketPagesOutOfRange) {
  for (uint32_t pages : {0u, kMaxPacketPagesLimit + 1, 0xFFFFFFFFu}) {
    Hello h = ValidHello();
    h.max_packet_pages = pages;
    absl::Status s = DecodeHello(EncodeH(h)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << pages;
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("max packet pages " + std::to_string(pages)),
                      HasSubstr("4096")));
  }
}

TEST(HelloTest, AuthMethodRoundTripsAndUnknownOnesAreRefused) {
  Hello h = ValidHello();
  h.auth = kAuthHmacSha256;
  absl::StatusOr<Hello> back = DecodeHello(EncodeH(h));
  ASSERT_OK(back);
  EXPECT_EQ(back->auth, kAuthHmacSha256);
  for (uint16_t method : {2, 0x100, 0xFFFF}) {
    h.auth = method;
    absl::Status s = DecodeHello(EncodeH(h)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << method;
    EXPECT_THAT(s.message(),
                HasSubstr("authentication method " + std::to_string(method)));
  }
}

TEST(HelloTest, RejectsAChunkSizeOfTheWrongForm) {
  // Bytes 48..55: 0, or a power of two in [4 KiB, 1 GiB] (whether the
  // transport may send one is the channels' rule: transport_family_test).
  for (uint64_t bytes : {uint64_t{1}, uint64_t{2048}, uint64_t{4097},
                         uint64_t{3} << 20, uint64_t{2} << 30}) {
    Hello h = ValidHello();
    h.rdma_chunk_bytes = bytes;
    absl::Status s = DecodeHello(EncodeH(h)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bytes;
    EXPECT_THAT(s.message(), HasSubstr("not a power of two")) << bytes;
  }
  for (uint64_t bytes :
       {uint64_t{4096}, uint64_t{1} << 20, uint64_t{1} << 30}) {
    Hello h = ValidHello();
    h.rdma_chunk_bytes = bytes;
    EXPECT_OK(DecodeHello(EncodeH(h))) << bytes;
  }
}

// ---- HelloReply ----

TEST(HelloReplyTest, AcceptedRoundTrip) {
  HelloReply r;
  r.capabilities = kFeatureVerify;
  std::vector<uint8_t> buf = EncodeR(r);
  EXPECT_EQ(std::string(buf.begin(), buf.begin() + 4), "RFHR");
  for (size_t i = 16; i < kHelloReplyBytes; ++i) EXPECT_EQ(buf[i], 0) << i;
  auto got = DecodeHelloReply(buf);
  ASSERT_OK(got);
  EXPECT_TRUE(got->accepted());
  EXPECT_EQ(got->status, 0);
  EXPECT_EQ(got->capabilities, kFeatureVerify);
  EXPECT_EQ(got->reason, "");
  EXPECT_OK(HelloReplyStatus(*got));
}

TEST(HelloReplyTest, RefusalRoundTripMapsStatusCode) {
  HelloReply r;
  r.status = static_cast<uint16_t>(absl::StatusCode::kResourceExhausted);
  r.reason = "too many channels";
  auto got = DecodeHelloReply(EncodeR(r));
  ASSERT_OK(got);
  EXPECT_FALSE(got->accepted());
  EXPECT_EQ(got->reason, "too many channels");
  absl::Status s = HelloReplyStatus(*got);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("too many channels"));

  for (int code = 1; code <= 16; ++code) {
    HelloReply rr;
    rr.status = static_cast<uint16_t>(code);
    rr.reason = "x";
    auto g = DecodeHelloReply(EncodeR(rr));
    ASSERT_OK(g) << code;
    EXPECT_EQ(HelloReplyStatus(*g).code(), static_cast<absl::StatusCode>(code));
  }
}

TEST(HelloReplyTest, ReasonTruncatedTo111Chars) {
  ASSERT_EQ(kHelloReasonBytes, 112u);
  HelloReply r;
  r.status = static_cast<uint16_t>(absl::StatusCode::kInternal);
  r.reason.clear();
  for (int i = 0; i < 300; ++i) r.reason.push_back('a' + i % 26);
  std::vector<uint8_t> buf = EncodeR(r);
  EXPECT_EQ(buf[kHelloReplyBytes - 1], 0) << "reason must stay terminated";
  auto got = DecodeHelloReply(buf);
  ASSERT_OK(got);
  EXPECT_EQ(got->reason.size(), 111u);
  EXPECT_EQ(got->reason, r.reason.substr(0, 111));

  // Exactly 111 survives whole; 112 loses its last char.
  r.reason = std::string(111, 'z');
  EXPECT_EQ(DecodeHelloReply(EncodeR(r))->reason, r.reason);
  r.reason = std::string(112, 'z');
  EXPECT_EQ(DecodeHelloReply(EncodeR(r))->reason, std::string(111, 'z'));
}

TEST(HelloReplyTest, UnterminatedReasonOnWireIsBounded) {
  HelloReply r;
  r.status = 2;
  std::vector<uint8_t> buf = EncodeR(r);
  for (size_t i = 16; i < kHelloReplyBytes; ++i) buf[i] = 'q';
  // A longer buffer: bytes past 128 must not leak into the reason.
  buf.push_back('!');
  auto got = DecodeHelloReply(buf);
  ASSERT_OK(got);
  EXPECT_EQ(got->reason, std::string(112, 'q'));
}

TEST(HelloReplyTest, NonPrintableReasonCharsReplaced) {
  HelloReply r;
  r.status = static_cast<uint16_t>(absl::StatusCode::kPermissionDenied);
  r.reason = std::string("bad\x01\n\x7f\xff") + "end";
  auto got = DecodeHelloReply(EncodeR(r));
  ASSERT_OK(got);
  EXPECT_EQ(got->reason, "bad????end");
  EXPECT_THAT(HelloReplyStatus(*got).message(), HasSubstr("bad????end"));
}

TEST(HelloReplyTest, RejectsStatusAbove16) {
  for (uint16_t st : {uint16_t{17}, uint16_t{100}, uint16_t{0xFFFF}}) {
    std::vector<uint8_t> buf = EncodeR(HelloReply{});
    Store16(buf.data() + 6, st);
    absl::Status s = DecodeHelloReply(buf).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(s.message(), HasSubstr("status " + std::to_string(st)));
  }
}

TEST(HelloReplyTest, RejectsBadMagicVersionTruncation) {
  std::vector<uint8_t> buf = EncodeR(HelloReply{});
  {
    absl::Status s =
        DecodeHelloReply(absl::MakeConstSpan(buf).first(127)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("127 of 128"));
  }
  {
    std::vector<uint8_t> b = buf;
    Store32(b.data(), kHelloMagic);
    absl::Status s = DecodeHelloReply(b).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("magic"), HasSubstr("0x52464853")));
  }
  {
    std::vector<uint8_t> b = buf;
    Store16(b.data() + 4, 9);
    absl::Status s = DecodeHelloReply(b).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("version 9"));
  }
}

}  // namespace
}  // namespace ramferry::proto
