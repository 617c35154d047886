// PostcopySource without a session: the switch's MISSING_PAGES frames, the
// push order (requested pages first, then on from the latest request), a
// resumed session's set, and requests out of turn.
#include "engine/postcopy/postcopy_source.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/control.h"
#include "proto/postcopy.h"
#include "ramferry/dirty_bitmap.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kPages = 1024;

// The payload of a whole control frame.
absl::Span<const uint8_t> Payload(const std::vector<uint8_t>& frame) {
  return absl::MakeConstSpan(frame).subspan(proto::kFrameHeaderBytes);
}

// The pages set in `b`, in order.
std::vector<uint64_t> Pages(const DirtyBitmap& b) {
  std::vector<uint64_t> out;
  for (uint64_t p = 0; p < b.pages(); ++p) {
    if ((b.PeekWord(p / 64) >> (p % 64) & 1) != 0) out.push_back(p);
  }
  return out;
}

class PostcopySourceTest : public ::testing::Test {
 protected:
  PostcopySourceTest()
      : region_(testing::MakeRegion(7, kPages * 4096)),
        source_(absl::MakeConstSpan(&region_.region, 1)),
        chunk_(kPages) {}

  // Switches with `missing` as the set; returns the frames sent.
  std::vector<std::vector<uint8_t>> Switch(
      const std::vector<uint64_t>& missing) {
    DirtyBitmap set(kPages);
    for (uint64_t p : missing) set.Set(p);
    DirtyBitmap* sets[] = {&set};
    std::vector<std::vector<uint8_t>> frames;
    EXPECT_OK(source_.BeginSwitch(sets, [&](const std::vector<uint8_t>& f) {
      frames.push_back(f);
      return absl::OkStatus();
    }));
    return frames;
  }

  // Takes up to `max` pages into a fresh chunk; returns them.
  std::vector<uint64_t> Take(uint64_t max) {
    chunk_.ClearAll();
    DirtyBitmap* chunk[] = {&chunk_};
    const uint64_t n = source_.FillPushChunk(chunk, max);
    std::vector<uint64_t> pages = Pages(chunk_);
    EXPECT_EQ(n, pages.size());
    return pages;
  }

  std::vector<proto::RegionInfo> Infos() const {
    return {{7, 4096, kPages * 4096, ""}};
  }

  testing::TestRegion region_;
  PostcopySource source_;
  DirtyBitmap chunk_;
};

TEST_F(PostcopySourceTest, TheSwitchSendsTheSetAndCountsIt) {
  EXPECT_FALSE(source_.started());
  std::vector<std::vector<uint8_t>> frames = Switch({3, 4, 5, 900});
  EXPECT_TRUE(source_.started());
  ASSERT_EQ(frames.size(), 1u);
  absl::StatusOr<proto::MissingPages> m =
      proto::DecodeMissingPages(Payload(frames[0]), Infos());
  ASSERT_OK(m);
  EXPECT_EQ(m->region_id, 7u);
  EXPECT_TRUE(m->last);
  ASSERT_EQ(m->ranges.size(), 2u);
  EXPECT_EQ(source_.Stats().missing_pages, 4u);
  EXPECT_TRUE(source_.may_arm());
}

TEST_F(PostcopySourceTest, RequestedPagesGoFirstThenThePushGoesOnFromThere) {
  Switch({1, 2, 3, 500, 501, 502, 800});
  proto::PageRequest q{7, {501}};
  ASSERT_OK(source_.OnPageRequest(Payload(proto::EncodePageRequest(q))));
  // The requested page's word first (500-502 share one), then the
  // cursor moves to the request and goes on from there, wrapping.
  EXPECT_THAT(Take(3), ElementsAre(500, 501, 502));
  EXPECT_THAT(Take(1), ElementsAre(800));
  EXPECT_THAT(Take(10), ElementsAre(1, 2, 3));
  EXPECT_THAT(Take(10), ElementsAre());
  EXPECT_EQ(source_.Stats().requested_pages, 1u);
}

TEST_F(PostcopySourceTest, ARequestForAPageAlreadyPushedTakesNothingAgain) {
  Switch({10, 11});
  EXPECT_THAT(Take(10), ElementsAre(10, 11));
  proto::PageRequest q{7, {10}};
  ASSERT_OK(source_.OnPageRequest(Payload(proto::EncodePageRequest(q))));
  EXPECT_THAT(Take(10), ElementsAre());
}

TEST_F(PostcopySourceTest, RequestsBeforeTheSwitchAreOutOfTurn) {
  proto::PageRequest q{7, {1}};
  absl::Status s = source_.OnPageRequest(Payload(proto::EncodePageRequest(q)));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("out of turn"));
}

TEST_F(PostcopySourceTest, AResumedSessionArmsOnlyOnceTheWholeSetArrived) {
  PostcopyStats before;
  before.resumes = 1;
  before.pushed_pages = 40;
  before.switch_ns = 1234;
  source_.CarryOver(before);
  source_.BeginResume();
  EXPECT_FALSE(source_.may_arm());
  proto::MissingPages first{7, false, {{20, 2}}};
  ASSERT_OK(
      source_.OnResumeMissing(Payload(proto::EncodeMissingPagesFrame(first))));
  EXPECT_FALSE(source_.may_arm());
  proto::MissingPages last{7, true, {{30, 1}}};
  ASSERT_OK(
      source_.OnResumeMissing(Payload(proto::EncodeMissingPagesFrame(last))));
  EXPECT_TRUE(source_.may_arm());
  source_.Armed();
  EXPECT_THAT(Take(10), ElementsAre(20, 21, 30));
  const PostcopyStats now = source_.Stats();
  EXPECT_EQ(now.resumes, 2u);
  EXPECT_EQ(now.pushed_pages, 40u);
  EXPECT_EQ(now.switch_ns, 1234u) << "a resume keeps the first switch's time";
}

TEST_F(PostcopySourceTest, MissingPagesOutsideAResumeAreRefused) {
  Switch({1});
  proto::MissingPages m{7, true, {{1, 1}}};
  absl::Status s =
      source_.OnResumeMissing(Payload(proto::EncodeMissingPagesFrame(m)));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("only a resumed session"));
}

}  // namespace
}  // namespace ramferry::engine
