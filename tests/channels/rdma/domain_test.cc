// RdmaDomain on a real device (the Soft-RoCE VM, tests/rdma_vm): one
// protection domain per session and end, and each registration made once,
// however many channels ask at once. Skipped, with the reason, where this
// host has no RDMA device.
#include "channels/rdma/domain.h"

#include <infiniband/verbs.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "channels/rdma/rdma.h"
#include "engine/control.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::channels {
namespace {

using ::ramferry::testing::StatusIs;
using ::testing::HasSubstr;

class RdmaDomainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = ProbeRdma(); !s.ok()) {
      GTEST_SKIP() << "needs an RDMA device (run in tests/rdma_vm): "
                   << s.message();
    }
    int n = 0;
    list_ = ibv_get_device_list(&n);
    ASSERT_GT(n, 0);
    verbs_ = ibv_open_device(list_[0]);
    ASSERT_NE(verbs_, nullptr);
    memory_.assign(kBytes, 7);
  }
  void TearDown() override {
    if (verbs_ != nullptr) ibv_close_device(verbs_);
    if (list_ != nullptr) ibv_free_device_list(list_);
  }

  static constexpr uint64_t kChunk = 64 << 10;
  static constexpr uint64_t kBytes = 16 * kChunk + 4096;  // a short last one
  ibv_device** list_ = nullptr;
  ibv_context* verbs_ = nullptr;
  std::vector<uint8_t> memory_;
};

TEST_F(RdmaDomainTest, OnePerSessionAndEnd) {
  const proto::SessionId a = engine::NewSessionId();
  const proto::SessionId b = engine::NewSessionId();
  auto src1 = RdmaDomain::ForSession(verbs_, a, RdmaDomain::End::kSource);
  auto src2 = RdmaDomain::ForSession(verbs_, a, RdmaDomain::End::kSource);
  auto dst = RdmaDomain::ForSession(verbs_, a, RdmaDomain::End::kDestination);
  auto other = RdmaDomain::ForSession(verbs_, b, RdmaDomain::End::kSource);
  ASSERT_OK(src1);
  ASSERT_OK(src2);
  ASSERT_OK(dst);
  ASSERT_OK(other);
  EXPECT_EQ(src1->get(), src2->get()) << "two channels of one session";
  EXPECT_NE(src1->get(), dst->get()) << "the two ends of one session";
  EXPECT_NE(src1->get(), other->get()) << "another session";
  // Gone with its last reference: the next ask makes a new one.
  ASSERT_OK((*other)->AddRegion(1, memory_.data(), kBytes, kChunk, 0, true));
  other->reset();
  auto again = RdmaDomain::ForSession(verbs_, b, RdmaDomain::End::kSource);
  ASSERT_OK(again);
  EXPECT_EQ((*again)->registered_bytes(), 0u);
}

TEST_F(RdmaDomainTest, EachChunkIsRegisteredOnceHoweverManyChannelsAsk) {
  auto d = RdmaDomain::ForSession(verbs_, engine::NewSessionId(),
                                  RdmaDomain::End::kDestination);
  ASSERT_OK(d);
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  auto r = (*d)->AddRegion(1, memory_.data(), kBytes, kChunk, access, false);
  ASSERT_OK(r);
  // A second channel names the same region: the same registrations.
  auto same = (*d)->AddRegion(1, memory_.data(), kBytes, kChunk, access, false);
  ASSERT_OK(same);
  EXPECT_EQ(*same, *r);
  auto moved =
      (*d)->AddRegion(1, memory_.data() + 4096, kBytes, kChunk, access, false);
  EXPECT_THAT(moved.status().message(), HasSubstr("registered again"));

  // Eight channels ask for every chunk at once.
  constexpr int kChannels = 8;
  const uint64_t chunks = (kBytes + kChunk - 1) / kChunk;
  std::atomic<uint64_t> made{0}, bytes{0}, failed{0};
  std::vector<std::vector<uint32_t>> keys(kChannels);
  std::vector<std::thread> threads;
  for (int c = 0; c < kChannels; ++c) {
    threads.emplace_back([&, c] {
      for (uint64_t k = 0; k < chunks; ++k) {
        auto got = (*d)->Chunk(*r, (k + c) % chunks);
        if (!got.ok()) {
          ++failed;
          continue;
        }
        if (got->made_now) {
          ++made;
          bytes += got->bytes;
        }
        keys[c].push_back(got->mr->rkey);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0u);
  EXPECT_EQ(made.load(), chunks) << "each chunk registered exactly once";
  EXPECT_EQ(bytes.load(), kBytes);
  EXPECT_EQ((*d)->registered_bytes(), kBytes);
  EXPECT_THAT((*d)->Chunk(*r, chunks),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("chunk " + std::to_string(chunks) +
                                 " of a region of " + std::to_string(chunks) +
                                 " chunks")));
}

TEST_F(RdmaDomainTest, PinAllRegistersTheWholeRegionOnceInTheBackground) {
  auto d = RdmaDomain::ForSession(verbs_, engine::NewSessionId(),
                                  RdmaDomain::End::kSource);
  ASSERT_OK(d);
  auto r = (*d)->AddRegion(3, memory_.data(), kBytes, kChunk, 0, true);
  ASSERT_OK(r);
  auto first = (*d)->Whole(*r);
  auto second = (*d)->Whole(*r);
  ASSERT_OK(first);
  ASSERT_OK(second);
  EXPECT_EQ(first->mr, second->mr);
  EXPECT_TRUE(first->made_now) << "the first to wait counts it";
  EXPECT_FALSE(second->made_now);
  EXPECT_EQ(first->bytes, kBytes);
  EXPECT_EQ((*d)->registered_bytes(), kBytes);
}

}  // namespace
}  // namespace ramferry::channels
