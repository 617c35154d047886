// Landings: every way a page lands notes the same things, each in its
// table (held, zero, unauthentic, digests), and none needs all of them.
#include "engine/pages/landings.h"

#include <sys/uio.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr uint64_t kPage = 4096;

// The digest calls, as "kind index first+count".
class CallLog : public LandingDigests {
 public:
  void Record(size_t index, absl::Span<const uint64_t> run_offsets,
              absl::Span<const iovec> runs) override {
    for (size_t i = 0; i < runs.size(); ++i) {
      calls.push_back(absl::StrFormat("data %d %d+%d", index,
                                      run_offsets[i] / kPage,
                                      runs[i].iov_len / kPage));
    }
  }
  void RecordZero(size_t index, uint64_t first, uint64_t count) override {
    calls.push_back(absl::StrFormat("zero %d %d+%d", index, first, count));
  }
  void RecordPlaced(size_t index, uint64_t first, uint64_t count,
                    const uint8_t* src) override {
    calls.push_back(absl::StrFormat("placed %d %d+%d", index, first, count));
  }
  void RecordZeroPlaced(size_t index, uint64_t first, uint64_t count) override {
    calls.push_back(
        absl::StrFormat("zero-placed %d %d+%d", index, first, count));
  }
  std::vector<std::string> calls;
};

struct Fixture {
  // Every page holds data, and the region claims to read as zero: a zero
  // page is then written only where ZeroPages was told data landed (else
  // it is skipped unread), which is how these tests see NoteData.
  Fixture() : r(testing::MakeRegion(1, 16 * kPage)) {
    std::memset(r.region.base, 0x5a, r.region.length);
    r.region.reads_as_zero = true;
  }
  absl::Span<const Region> regions() const { return {&r.region, 1}; }
  testing::TestRegion r;
};

TEST(Landings, DataIsAuthenticNotedAndDigestedAndHeldOnceDeltasWent) {
  Fixture f;
  HeldPages held(f.regions());
  ZeroPages zeros(f.regions());
  UnauthenticPages unauthentic(f.regions());
  CallLog digests;
  Landings l({.held = &held,
              .zeros = &zeros,
              .unauthentic = &unauthentic,
              .digests = &digests});
  unauthentic.Mark(0, 2, 3);  // a forged payload's pages, before this read
  const uint64_t epoch = l.Epoch();
  const uint64_t offsets[] = {2 * kPage};
  const iovec runs[] = {{f.r.region.page(2), 3 * kPage}};
  l.Data(0, kPage, offsets, runs, epoch);
  EXPECT_EQ(unauthentic.count(), 0u);
  EXPECT_THAT(digests.calls, ElementsAre("data 0 2+3"));
  // Data now: a zero page for it must be written, not skipped.
  const absl::StatusOr<ZeroPages::Applied> z = zeros.Zero(0, 2, 1);
  ASSERT_OK(z);
  EXPECT_EQ(z->written, 1u);
  // Held only once the packet's deltas were applied.
  EXPECT_FALSE(held.Test(0, 2));
  l.Held(0, kPage, offsets, runs);
  EXPECT_TRUE(held.Test(0, 2));
  EXPECT_TRUE(held.Test(0, 4));
  EXPECT_FALSE(held.Test(0, 5));
}

TEST(Landings, AMarkMadeAfterTheReadBeganStays) {
  Fixture f;
  UnauthenticPages unauthentic(f.regions());
  Landings l({.unauthentic = &unauthentic});
  const uint64_t epoch = l.Epoch();
  unauthentic.Mark(0, 7, 1);  // another channel's forged write, meanwhile
  const uint64_t offsets[] = {7 * kPage};
  const iovec runs[] = {{f.r.region.page(7), kPage}};
  l.Data(0, kPage, offsets, runs, epoch);
  EXPECT_TRUE(unauthentic.Test(0, 7));
  l.Zero(0, 7, 1, l.Epoch());
  EXPECT_FALSE(unauthentic.Test(0, 7));
}

TEST(Landings, ZeroPagesAreHeldAuthenticAndDigestedAsZero) {
  Fixture f;
  HeldPages held(f.regions());
  UnauthenticPages unauthentic(f.regions());
  CallLog digests;
  Landings l({.held = &held, .unauthentic = &unauthentic, .digests = &digests});
  unauthentic.Mark(0, 8, 4);
  l.Zero(0, 8, 4, l.Epoch());
  EXPECT_TRUE(held.Test(0, 8));
  EXPECT_TRUE(held.Test(0, 11));
  EXPECT_EQ(unauthentic.count(), 0u);
  EXPECT_THAT(digests.calls, ElementsAre("zero 0 8+4"));
}

TEST(Landings, DeltasAreDigestedAndDataButNeitherHeldNorCleared) {
  Fixture f;
  HeldPages held(f.regions());
  ZeroPages zeros(f.regions());
  UnauthenticPages unauthentic(f.regions());
  CallLog digests;
  Landings l({.held = &held,
              .zeros = &zeros,
              .unauthentic = &unauthentic,
              .digests = &digests});
  unauthentic.Mark(0, 3, 1);
  const uint64_t offsets[] = {3 * kPage};
  const iovec runs[] = {{f.r.region.page(3), kPage}};
  l.Delta(0, offsets, runs);
  EXPECT_THAT(digests.calls, ElementsAre("data 0 3+1"));
  EXPECT_FALSE(held.Test(0, 3));  // a delta applies to a held page only
  EXPECT_TRUE(unauthentic.Test(0, 3));
  const absl::StatusOr<ZeroPages::Applied> z = zeros.Zero(0, 3, 1);
  ASSERT_OK(z);
  EXPECT_EQ(z->written, 1u);
}

TEST(Landings, PlacementsRecordOnlyTheirDigests) {
  Fixture f;
  CallLog digests;
  Landings l({.digests = &digests});
  const uint8_t page[kPage] = {};
  l.Placed(0, 5, 1, page);
  l.ZeroPlaced(0, 6, 2);
  EXPECT_THAT(digests.calls, ElementsAre("placed 0 5+1", "zero-placed 0 6+2"));
}

TEST(Landings, AnUnfinishedPayloadIsDataAndOnASealedStreamUnauthentic) {
  Fixture f;
  ZeroPages zeros(f.regions());
  UnauthenticPages unauthentic(f.regions());
  CallLog digests;
  Landings l(
      {.zeros = &zeros, .unauthentic = &unauthentic, .digests = &digests});
  const uint64_t offsets[] = {0, 10 * kPage};
  const iovec runs[] = {{f.r.region.page(0), kPage},
                        {f.r.region.page(10), 2 * kPage}};
  l.Unfinished(0, kPage, offsets, runs, /*sealed=*/false);
  EXPECT_EQ(unauthentic.count(), 0u);
  l.Unfinished(0, kPage, offsets, runs, /*sealed=*/true);
  EXPECT_TRUE(unauthentic.Test(0, 0));
  EXPECT_TRUE(unauthentic.Test(0, 11));
  EXPECT_FALSE(unauthentic.Test(0, 12));
  EXPECT_THAT(digests.calls, IsEmpty());  // never digested
  const absl::StatusOr<ZeroPages::Applied> z = zeros.Zero(0, 10, 1);
  ASSERT_OK(z);
  EXPECT_EQ(z->written, 1u);
}

TEST(Landings, NoTablesIsNothingToNote) {
  Fixture f;
  Landings l;
  const uint64_t offsets[] = {0};
  const iovec runs[] = {{f.r.region.page(0), kPage}};
  EXPECT_EQ(l.Epoch(), 0u);
  l.Data(0, kPage, offsets, runs, 0);
  l.Delta(0, offsets, runs);
  l.Held(0, kPage, offsets, runs);
  l.Zero(0, 0, 1, 0);
  l.Placed(0, 0, 1, f.r.region.page(0));
  l.ZeroPlaced(0, 0, 1);
  l.Unfinished(0, kPage, offsets, runs, true);
}

}  // namespace
}  // namespace ramferry::engine
