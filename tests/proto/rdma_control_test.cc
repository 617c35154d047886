// The RDMA control messages' CREDITS: one grant a message, never of none.
// (Every type's byte-exact round trip is the rdma_control fuzzer's.)
#include "proto/rdma_control.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::proto {
namespace {

using ::testing::HasSubstr;

TEST(RdmaControlTest, CreditsRoundTrip) {
  RdmaControl c;
  c.type = RdmaControlType::kCredits;
  c.credits = 0xfffffffe;
  const std::vector<uint8_t> b = EncodeRdmaControl(c);
  EXPECT_EQ(b.size(), kRdmaControlHeaderBytes + 8);
  EXPECT_LE(b.size(), RdmaControlMaxBytes());
  absl::StatusOr<RdmaControl> d = DecodeRdmaControl(b);
  ASSERT_OK(d);
  EXPECT_EQ(d->type, RdmaControlType::kCredits);
  EXPECT_EQ(d->credits, 0xfffffffeu);
}

TEST(RdmaControlTest, CreditsOfNoneTwoOrAReservedWordAreRefused) {
  RdmaControl c;
  c.type = RdmaControlType::kCredits;
  c.credits = 0;
  absl::StatusOr<RdmaControl> none = DecodeRdmaControl(EncodeRdmaControl(c));
  EXPECT_THAT(none.status().message(), HasSubstr("grants none"));

  c.credits = 5;
  std::vector<uint8_t> b = EncodeRdmaControl(c);
  b[kRdmaControlHeaderBytes + 4] = 1;
  EXPECT_THAT(DecodeRdmaControl(b).status().message(),
              HasSubstr("reserved word"));

  b = EncodeRdmaControl(c);
  b[7] = 2;
  b.insert(b.end(), b.begin() + kRdmaControlHeaderBytes, b.end());
  EXPECT_THAT(DecodeRdmaControl(b).status().message(),
              HasSubstr("outside [1, 1]"));
}

}  // namespace
}  // namespace ramferry::proto
