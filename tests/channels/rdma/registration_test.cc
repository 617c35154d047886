// The RDMA channel's registration planning without a device: chunk spans,
// pieces split at chunk boundaries, which chunks go as COMPRESS and which
// are asked for (in batches), keys applied, and the destination's side of
// COMPRESS and REGISTER_REQUEST with registration injected.
#include "channels/rdma/registration.h"

#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::channels {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr uint64_t kChunk = 4096;

MATCHER_P2(Ref, region, chunk, "") {
  return arg.region == static_cast<uint32_t>(region) &&
         arg.chunk == static_cast<uint32_t>(chunk);
}

class RdmaRegistrationTest : public ::testing::Test {
 protected:
  RdmaRegistrationTest() : registry_(kChunk) {}

  // Region `id` of `bytes` bytes, all zero.
  uint8_t* Add(uint32_t id, uint64_t bytes) {
    memory_[id].assign(bytes, 0);
    EXPECT_EQ(registry_.AddRegion(id, memory_[id].data(), bytes),
              (bytes + kChunk - 1) / kChunk);
    return memory_[id].data();
  }

  // A packet of one run [off, off + len) of region `id`.
  struct Packet {
    std::vector<iovec> iov;
    std::vector<uint64_t> offsets;
    uint32_t region;
    PageRuns pages() const { return {region, iov, offsets}; }
  };
  Packet Run(uint32_t id, uint64_t off, uint64_t len) {
    return {{{memory_[id].data() + off, len}}, {off}, id};
  }

  RegistrationPlan Plan(const std::vector<Packet>& packets,
                        size_t batch = proto::kMaxRdmaControlEntries) {
    std::vector<PageRuns> runs;
    for (const Packet& p : packets) runs.push_back(p.pages());
    return registry_.Plan(runs, batch);
  }

  RemoteChunk::State State(uint32_t id, uint64_t chunk) {
    return registry_.region(id).remote[chunk].state;
  }

  std::map<uint32_t, std::vector<uint8_t>> memory_;
  ChunkRegistry registry_;
};

TEST_F(RdmaRegistrationTest, ChunkSpansEndAtTheRegionAndRejectOthers) {
  uint8_t* base = Add(1, 2 * kChunk + 100);
  absl::StatusOr<absl::Span<uint8_t>> first = registry_.ChunkSpan({1, 0});
  ASSERT_OK(first);
  EXPECT_EQ(first->data(), base);
  EXPECT_EQ(first->size(), kChunk);
  absl::StatusOr<absl::Span<uint8_t>> last = registry_.ChunkSpan({1, 2});
  ASSERT_OK(last);
  EXPECT_EQ(last->data(), base + 2 * kChunk);
  EXPECT_EQ(last->size(), 100u);  // the last chunk is partial
  EXPECT_THAT(registry_.ChunkSpan({1, 3}).status().message(),
              HasSubstr("chunk 3 of region 1, which does not exist"));
  EXPECT_THAT(
      registry_.ChunkSpan({2, 0}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "RDMA control names chunk 0 of region 2, which does not exist")));
}

TEST_F(RdmaRegistrationTest, PiecesSplitAtChunkBoundaries) {
  uint8_t* base = Add(0, 4 * kChunk);
  // From the middle of chunk 0 to the middle of chunk 2, plus one run that
  // ends exactly at a boundary.
  Packet p{{{base + kChunk / 2, 2 * kChunk}, {base + 3 * kChunk, kChunk}},
           {kChunk / 2, 3 * kChunk},
           0};
  std::vector<ChunkRegistry::Piece> pieces;
  registry_.ForEachPiece(p.pages(), [&](const ChunkRegistry::Piece& piece) {
    pieces.push_back(piece);
  });
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].chunk, 0u);
  EXPECT_EQ(pieces[0].offset, kChunk / 2);
  EXPECT_EQ(pieces[0].length, kChunk / 2);
  EXPECT_EQ(pieces[0].addr, base + kChunk / 2);
  EXPECT_EQ(pieces[1].chunk, 1u);
  EXPECT_EQ(pieces[1].offset, kChunk);
  EXPECT_EQ(pieces[1].length, kChunk);
  EXPECT_EQ(pieces[1].addr, base + kChunk);
  EXPECT_EQ(pieces[2].chunk, 2u);
  EXPECT_EQ(pieces[2].length, kChunk / 2);
  EXPECT_EQ(pieces[3].chunk, 3u);
  EXPECT_EQ(pieces[3].offset, 3 * kChunk);
  EXPECT_EQ(pieces[3].length, kChunk);
  for (const auto& piece : pieces) {
    EXPECT_EQ(piece.region, &registry_.region(0));
  }
}

TEST_F(RdmaRegistrationTest, ZeroChunksCompressAndDataChunksRegister) {
  uint8_t* base = Add(0, 3 * kChunk);
  base[kChunk + 7] = 1;  // chunk 1 holds data; 0 and 2 are zero
  RegistrationPlan plan = Plan({Run(0, 0, 3 * kChunk)});
  ASSERT_EQ(plan.compress.size(), 1u);
  EXPECT_THAT(plan.compress[0], ElementsAre(Ref(0, 0), Ref(0, 2)));
  ASSERT_EQ(plan.register_batches.size(), 1u);
  EXPECT_THAT(plan.register_batches[0], ElementsAre(Ref(0, 1)));
  EXPECT_EQ(State(0, 0), RemoteChunk::kZero);
  EXPECT_EQ(State(0, 1), RemoteChunk::kUnknown);
  EXPECT_EQ(State(0, 2), RemoteChunk::kZero);
}

TEST_F(RdmaRegistrationTest, ZeroTestReadsOnlyTheLastPartialChunk) {
  // One byte of data in the last, partial chunk; the bytes after the
  // region's end are not the chunk's and must not be looked at.
  memory_[0].assign(kChunk + 2 * kChunk, 0);
  memory_[0][kChunk + 20] = 5;  // past the region's end
  ASSERT_EQ(registry_.AddRegion(0, memory_[0].data(), kChunk + 16), 2u);
  RegistrationPlan plan = Plan({Run(0, kChunk, 16)});
  EXPECT_THAT(plan.register_batches, IsEmpty());
  ASSERT_EQ(plan.compress.size(), 1u);
  EXPECT_THAT(plan.compress[0], ElementsAre(Ref(0, 1)));
  memory_[0][kChunk + 15] = 1;  // its last byte
  plan = Plan({Run(0, kChunk, 16)});
  EXPECT_THAT(plan.compress, IsEmpty());
  ASSERT_EQ(plan.register_batches.size(), 1u);
  EXPECT_THAT(plan.register_batches[0], ElementsAre(Ref(0, 1)));
}

TEST_F(RdmaRegistrationTest, EachChunkIsDecidedOncePerPlan) {
  uint8_t* a = Add(0, 2 * kChunk);
  uint8_t* b = Add(1, kChunk);
  std::memset(a, 1, 2 * kChunk);
  b[0] = 1;
  // Three packets touch chunk 0 of region 0; chunk 0 of region 1 is a
  // different chunk despite the same index.
  RegistrationPlan plan = Plan({Run(0, 0, 100), Run(0, 200, kChunk),
                                Run(1, 0, 10), Run(0, kChunk - 1, 1)});
  EXPECT_THAT(plan.compress, IsEmpty());
  ASSERT_EQ(plan.register_batches.size(), 1u);
  EXPECT_THAT(plan.register_batches[0],
              ElementsAre(Ref(0, 0), Ref(0, 1), Ref(1, 0)));
}

TEST_F(RdmaRegistrationTest, RegisterBatchesHoldAtMostTheBatchSize) {
  uint8_t* base = Add(0, 5 * kChunk);
  std::memset(base, 1, 5 * kChunk);
  RegistrationPlan one = Plan({Run(0, 0, 5 * kChunk)}, /*batch=*/1);
  ASSERT_EQ(one.register_batches.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_THAT(one.register_batches[i], ElementsAre(Ref(0, i)));
  }
  RegistrationPlan two = Plan({Run(0, 0, 5 * kChunk)}, /*batch=*/2);
  ASSERT_EQ(two.register_batches.size(), 3u);
  EXPECT_THAT(two.register_batches[0], ElementsAre(Ref(0, 0), Ref(0, 1)));
  EXPECT_THAT(two.register_batches[1], ElementsAre(Ref(0, 2), Ref(0, 3)));
  EXPECT_THAT(two.register_batches[2], ElementsAre(Ref(0, 4)));
}

TEST_F(RdmaRegistrationTest, ControlMessagesHoldAtMostTheirEntryLimit) {
  constexpr size_t kMax = proto::kMaxRdmaControlEntries;
  const uint64_t chunks = 2 * kMax + 1;
  uint8_t* base = Add(0, chunks * kChunk);
  // Even chunks zero, odd ones data: kMax + 1 of each.
  for (uint64_t c = 1; c < chunks; c += 2) base[c * kChunk] = 1;
  RegistrationPlan plan = Plan({Run(0, 0, chunks * kChunk)});
  ASSERT_EQ(plan.compress.size(), 2u);
  EXPECT_EQ(plan.compress[0].size(), kMax);
  EXPECT_THAT(plan.compress[1], ElementsAre(Ref(0, 2 * kMax)));
  ASSERT_EQ(plan.register_batches.size(), 1u);
  EXPECT_EQ(plan.register_batches[0].size(), kMax);
  EXPECT_THAT(plan.register_batches[0].back(), Ref(0, 2 * kMax - 1));
}

TEST_F(RdmaRegistrationTest, KnownChunksAreSkippedAndZeroOnesDecidedAgain) {
  uint8_t* base = Add(0, 3 * kChunk);
  base[0] = 1;
  RegistrationPlan plan = Plan({Run(0, 0, 3 * kChunk)});
  ASSERT_EQ(plan.register_batches.size(), 1u);
  ASSERT_OK(registry_.ApplyKeys(plan.register_batches[0], {{77, 0x1000}}));
  EXPECT_EQ(State(0, 0), RemoteChunk::kKnown);
  EXPECT_EQ(registry_.region(0).remote[0].rkey, 77u);
  EXPECT_EQ(registry_.region(0).remote[0].addr, 0x1000u);
  // Chunk 0 is registered: never again. Chunk 1 went as zero and now holds
  // data: asked for. Chunk 2 is still zero: compressed again.
  base[kChunk] = 1;
  plan = Plan({Run(0, 0, 3 * kChunk)});
  ASSERT_EQ(plan.compress.size(), 1u);
  EXPECT_THAT(plan.compress[0], ElementsAre(Ref(0, 2)));
  ASSERT_EQ(plan.register_batches.size(), 1u);
  EXPECT_THAT(plan.register_batches[0], ElementsAre(Ref(0, 1)));
  EXPECT_EQ(State(0, 1), RemoteChunk::kUnknown);
}

TEST_F(RdmaRegistrationTest, KeysMustAnswerTheWholeRequest) {
  Add(0, 2 * kChunk);
  const std::vector<proto::ChunkRef> batch = {{0, 0}, {0, 1}};
  absl::Status s = registry_.ApplyKeys(batch, {{1, 2}});
  EXPECT_THAT(s.message(),
              HasSubstr("carries 1 keys for a request of 2 chunks"));
  EXPECT_EQ(State(0, 0), RemoteChunk::kUnknown);
  EXPECT_OK(registry_.ApplyKeys(batch, {{1, 2}, {3, 4}}));
  EXPECT_EQ(State(0, 1), RemoteChunk::kKnown);
  EXPECT_EQ(registry_.region(0).remote[1].rkey, 3u);
}

TEST_F(RdmaRegistrationTest, RegionKeysMustNameARegionOfItsLength) {
  Add(4, 3 * kChunk);
  EXPECT_THAT(registry_.ApplyRegionKeys({{{5, 1, 2, 3 * kChunk}}}).message(),
              HasSubstr("region 5"));
  EXPECT_THAT(
      registry_.ApplyRegionKeys({{{4, 1, 2, kChunk}}}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(
                   "destination sent keys for region 4 of 4096 bytes, which")));
  ASSERT_OK(registry_.ApplyRegionKeys({{{4, 9, 0x5000, 3 * kChunk}}}));
  EXPECT_EQ(registry_.region(4).remote_rkey, 9u);
  EXPECT_EQ(registry_.region(4).remote_addr, 0x5000u);
}

TEST_F(RdmaRegistrationTest, DestinationCountsCompressedChunks) {
  Add(0, 3 * kChunk);
  Add(1, kChunk);
  ASSERT_OK(registry_.MarkCompressed({{0, 0}, {0, 2}, {1, 0}}));
  EXPECT_EQ(registry_.zero_chunks(), 3);
  ASSERT_OK(registry_.MarkCompressed({{0, 0}}));  // again: no change
  EXPECT_EQ(registry_.zero_chunks(), 3);
  EXPECT_THAT(
      registry_.MarkCompressed({{0, 3}}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "RDMA control names chunk 3 of region 0, which does not exist")));
  EXPECT_THAT(
      registry_.MarkCompressed({{2, 0}}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "RDMA control names chunk 0 of region 2, which does not exist")));
  EXPECT_EQ(registry_.zero_chunks(), 3);
}

TEST_F(RdmaRegistrationTest, RegisterRequestClearsZeroAndAnswersKeys) {
  uint8_t* base = Add(0, 2 * kChunk + 8);
  ASSERT_OK(registry_.MarkCompressed({{0, 1}, {0, 2}}));
  std::vector<std::pair<uint8_t*, size_t>> registered;
  absl::StatusOr<std::vector<proto::ChunkKey>> keys =
      registry_.AnswerRegisterRequest(
          {{0, 2}, {0, 0}},
          [&](const proto::ChunkRef& ref,
              absl::Span<uint8_t> span) -> absl::StatusOr<uint32_t> {
            registered.push_back({span.data(), span.size()});
            return 100 + ref.chunk;
          });
  ASSERT_OK(keys);
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[0].rkey, 102u);
  EXPECT_EQ((*keys)[0].addr, reinterpret_cast<uint64_t>(base + 2 * kChunk));
  EXPECT_EQ((*keys)[1].rkey, 100u);
  EXPECT_EQ((*keys)[1].addr, reinterpret_cast<uint64_t>(base));
  ASSERT_EQ(registered.size(), 2u);
  EXPECT_EQ(registered[0].second, 8u);  // the last, partial chunk
  EXPECT_EQ(registered[1].second, kChunk);
  EXPECT_EQ(registry_.zero_chunks(), 1);  // chunk 1 is still zero
}

TEST_F(RdmaRegistrationTest, RegisterRequestFailures) {
  Add(0, kChunk);
  auto ok = [](const proto::ChunkRef&,
               absl::Span<uint8_t>) -> absl::StatusOr<uint32_t> { return 1; };
  EXPECT_THAT(
      registry_.AnswerRegisterRequest({{0, 1}}, ok),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "RDMA control names chunk 1 of region 0, which does not exist")));
  absl::StatusOr<std::vector<proto::ChunkKey>> failed =
      registry_.AnswerRegisterRequest(
          {{0, 0}},
          [](const proto::ChunkRef&,
             absl::Span<uint8_t>) -> absl::StatusOr<uint32_t> {
            return absl::ResourceExhaustedError("no memory to pin");
          });
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(RdmaRegistrationTest, ZeroFillTouchesOnlyCompressedChunksOfThePacket) {
  uint8_t* base = Add(0, 3 * kChunk);
  uint8_t* other = Add(1, kChunk);
  std::memset(base, 0xaa, 3 * kChunk);
  std::memset(other, 0xbb, kChunk);
  ASSERT_OK(registry_.MarkCompressed({{0, 1}}));
  // A packet's pages from the middle of chunk 0 to the middle of chunk 2,
  // and a run in a region with no zero chunks.
  const iovec dst[] = {{base + kChunk / 2, 2 * kChunk}, {other, kChunk}};
  registry_.ZeroFillCompressed(dst);
  const std::vector<uint8_t>& m = memory_[0];
  EXPECT_EQ(m[kChunk - 1], 0xaa);
  EXPECT_EQ(m[kChunk], 0);
  EXPECT_EQ(m[2 * kChunk - 1], 0);
  EXPECT_EQ(m[2 * kChunk], 0xaa);
  EXPECT_EQ(memory_[1][0], 0xbb);
  // Chunk 1 registered since: no longer filled.
  std::memset(base, 0xaa, 3 * kChunk);
  ASSERT_OK(registry_.AnswerRegisterRequest(
      {{0, 1}},
      [](const proto::ChunkRef&,
         absl::Span<uint8_t>) -> absl::StatusOr<uint32_t> { return 1; }));
  EXPECT_EQ(registry_.zero_chunks(), 0);
  registry_.ZeroFillCompressed(dst);
  EXPECT_EQ(m[kChunk], 0xaa);
}

}  // namespace
}  // namespace ramferry::channels
