// ChannelSender on its own: commands pushed into its ring, drained on the
// test's thread into a transport that keeps what was sent. Each way a
// packet's page digests are taken (ChannelSender::DigestPoint) records the
// bytes the destination gets, whatever the wire carries.
#include "engine/channel_sender.h"

#include <sys/uio.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/command_ring.h"
#include "engine/failure.h"
#include "engine/verify.h"
#include "gtest/gtest.h"
#include "proto/packet.h"
#include "proto/seal.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"

namespace ramferry::engine {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint32_t kPages = 8;

// A send-only transport that keeps each packet's header and payload.
class KeepingTransport : public channels::Transport {
 public:
  struct Sent {
    std::vector<uint8_t> header;
    std::vector<uint8_t> payload;
  };
  TransportKind kind() const override { return TransportKind::kTcp; }
  uint32_t capabilities() const override { return 0; }
  absl::StatusOr<absl::Span<uint8_t>> AcquireHeader() override {
    return absl::MakeSpan(header_);
  }
  absl::Status SendPacket(const channels::OutgoingPacket& packet) override {
    Sent s;
    s.header.assign(header_.begin(), header_.begin() + packet.header_bytes);
    for (const iovec& v : packet.payload) {
      const auto* b = static_cast<const uint8_t*>(v.iov_base);
      s.payload.insert(s.payload.end(), b, b + v.iov_len);
    }
    sent->push_back(std::move(s));
    return absl::OkStatus();
  }
  absl::Status Flush() override { return absl::OkStatus(); }
  absl::Status ReadExact(absl::Span<uint8_t>, bool) override {
    return absl::UnimplementedError("send-only");
  }
  absl::Status ReadPayload(absl::Span<const iovec>) override {
    return absl::UnimplementedError("send-only");
  }
  void Shutdown() override {}

  std::vector<Sent>* sent = nullptr;

 private:
  std::vector<uint8_t> header_ = std::vector<uint8_t>(64 << 10);
};

proto::SealKey Key() {
  proto::SealKey k;
  for (size_t i = 0; i < k.key.size(); ++i) k.key[i] = uint8_t(i + 1);
  return k;
}

// One channel over one region: sends pages [0, kPages) as one packet.
struct Channel {
  Channel(const Region& region, ChannelSender::Config config,
          proto::SealMode seal = proto::SealMode::kNone)
      : region(region) {
    auto transport = std::make_unique<KeepingTransport>();
    transport->sent = &sent;
    std::unique_ptr<proto::Sealer> sealer;
    if (seal != proto::SealMode::kNone) {
      sealer = *proto::Sealer::Create(seal, Key(), proto::Sealer::Use::kSeal);
    }
    sender = std::make_unique<ChannelSender>(
        0, std::move(transport), absl::MakeConstSpan(&this->region, 1), config,
        &failure, nullptr, std::move(sealer));
  }
  absl::Status SendAll(uint64_t round) {
    Command* c = sender->ring().BeginPush();
    c->type = CommandType::kWrite;
    c->region = 0;
    c->round = round;
    c->page_count = kPages;
    for (uint32_t i = 0; i < kPages; ++i) c->offsets[i] = i * kPage;
    sender->ring().CommitPush();
    return sender->DrainInline();
  }
  ChannelStats Stats() const {
    ChannelStats s;
    sender->ExportStats(&s);
    return s;
  }
  Region region;
  SessionFailure failure{[](const absl::Status&, Origin) {}};
  std::vector<KeepingTransport::Sent> sent;
  std::unique_ptr<ChannelSender> sender;
};

// The digests of the region's pages as its memory holds them now.
std::vector<uint64_t> MemoryDigests(const Region& region) {
  std::vector<uint64_t> d(kPages);
  PageDigests(region, 0, absl::MakeSpan(d));
  return d;
}

std::vector<uint64_t> Recorded(const DigestTable& t) {
  const absl::Span<const uint64_t> r = t.region(0);
  return {r.begin(), r.begin() + kPages};
}

TEST(ChannelSender, AfterTheSendFromTheMemoryItRead) {
  testing::TestRegion r = testing::MakeRegion(1, kPages * kPage, 7, true);
  std::unique_ptr<DigestTable> sent = *DigestTable::Create({&r.region, 1});
  ChannelSender::Config config;
  config.sent_digests = sent.get();
  Channel ch(r.region, config);
  ASSERT_OK(ch.SendAll(0));
  ASSERT_EQ(ch.sent.size(), 1u);
  // Unsealed, uncopied: the wire carries the memory, and so do the digests.
  EXPECT_EQ(ch.sent[0].payload.size(), kPages * kPage);
  EXPECT_EQ(
      std::memcmp(ch.sent[0].payload.data(), r.region.base, kPages * kPage), 0);
  EXPECT_EQ(Recorded(*sent), MemoryDigests(r.region));
  EXPECT_EQ(ch.Stats().sealed_in_place_bytes, 0u);
}

// Pages of memory frozen or not, sent under a mac, with both digest
// tables a source keeps.
struct MacOverMemory {
  MacOverMemory(bool frozen, uint64_t seed)
      : r(testing::MakeRegion(1, kPages * kPage, seed, true)),
        sent(*DigestTable::Create({&r.region, 1})),
        frozen_digests(*FrozenDigests::Create({&r.region, 1})),
        memory_frozen(frozen) {
    ChannelSender::Config config;
    config.sent_digests = sent.get();
    config.memory_frozen = &memory_frozen;
    config.frozen_digests = frozen_digests.get();
    ch = std::make_unique<Channel>(r.region, config, proto::SealMode::kMac);
  }
  testing::TestRegion r;
  std::unique_ptr<DigestTable> sent;
  std::unique_ptr<FrozenDigests> frozen_digests;
  const std::atomic<bool> memory_frozen;
  std::unique_ptr<Channel> ch;
};

TEST(ChannelSender, WhileSealingFrozenMemoryInPlace) {
  MacOverMemory m(/*frozen=*/true, 8);
  ASSERT_OK(m.ch->SendAll(1));
  ASSERT_EQ(m.ch->sent.size(), 1u);
  // A mac over the memory where it lies: no staging copy, and both tables
  // hold what the seal's pass read.
  EXPECT_EQ(m.ch->Stats().sealed_in_place_bytes, kPages * kPage);
  EXPECT_EQ(Recorded(*m.sent), MemoryDigests(m.r.region));
  EXPECT_EQ(Recorded(m.frozen_digests->digests()), MemoryDigests(m.r.region));
  for (uint32_t p = 0; p < kPages; ++p) {
    EXPECT_TRUE(m.frozen_digests->Has(0, p)) << p;
  }
}

TEST(ChannelSender, NotFrozenAMacGoesFromAStagedCopyAndRecordsAfter) {
  MacOverMemory m(/*frozen=*/false, 9);
  ASSERT_OK(m.ch->SendAll(1));
  EXPECT_EQ(m.ch->Stats().sealed_in_place_bytes, 0u);
  EXPECT_EQ(Recorded(*m.sent), MemoryDigests(m.r.region));
  // Memory that may still change is no frozen page.
  for (uint32_t p = 0; p < kPages; ++p) {
    EXPECT_FALSE(m.frozen_digests->Has(0, p)) << p;
  }
}

TEST(ChannelSender, FromTheCopyBeforeItIsEncrypted) {
  // A region with a file, encrypted: the pages are read through the file
  // into the channel's copy and encrypted there. The digests are taken
  // from the copy before that, so they are the plaintext's.
  testing::FileRegion r = testing::MakeFileRegion(1, kPages * kPage, 10, true);
  std::unique_ptr<DigestTable> sent = *DigestTable::Create({&r.region, 1});
  ChannelSender::Config config;
  config.sent_digests = sent.get();
  Channel ch(r.region, config, proto::SealMode::kEncrypt);
  ASSERT_OK(ch.SendAll(1));
  ASSERT_EQ(ch.sent.size(), 1u);
  ASSERT_EQ(ch.sent[0].payload.size(), kPages * kPage);
  EXPECT_NE(
      std::memcmp(ch.sent[0].payload.data(), r.region.base, kPages * kPage),
      0);  // ciphertext on the wire
  EXPECT_EQ(Recorded(*sent), MemoryDigests(r.region));
  EXPECT_GT(ch.Stats().file_bytes, 0u);
}

}  // namespace
}  // namespace ramferry::engine
