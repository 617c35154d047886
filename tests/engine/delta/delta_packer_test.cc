// DeltaPacker on its own, against a real DeltaCache: what a packet's
// entries and payload hold for pages seen first, unchanged, changed a
// little or too much, zero, forgotten, past the cache, and sent or not;
// and that its records, applied as a destination applies them
// (proto::CheckDelta, proto::ApplyDelta), give back the source's bytes.
#include "engine/delta/delta_packer.h"

#include <sys/uio.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/delta/delta_cache.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/packet.h"
#include "proto/page_delta.h"
#include "tests/support/status_matchers.h"

namespace ramferry::engine {
namespace {

using ::testing::ElementsAre;

constexpr uint32_t kPage = 4096;
// Bytes after the room Pack is given, which it must leave alone.
constexpr uint64_t kGuardBytes = 64;
constexpr uint8_t kGuard = 0xEE;

// The entry of page `page`, whole; and of page `page` flagged all zero.
uint64_t Whole(uint64_t page) { return page * kPage; }
uint64_t Zero(uint64_t page) { return page * kPage | proto::kZeroPageFlag; }

// One packed packet, as it would go on the wire, and what Pack said the
// destination holds of it.
struct Packet {
  std::vector<uint64_t> entries;
  DeltaPacker::Packed packed;
  std::vector<uint8_t> payload;
  std::vector<iovec> sent;
  std::vector<uint64_t> sent_offsets;
};

// A source region of `pages` random pages, the destination's copy of it
// (zero until packets land), and a packer over a cache of `slots` pages.
class Packing {
 public:
  Packing(uint64_t pages, uint32_t slots)
      : src_(pages * kPage), dst_(pages * kPage) {
    std::mt19937_64 rng(pages * 31 + slots);
    for (uint8_t& b : src_) b = static_cast<uint8_t>(rng());
    absl::StatusOr<std::unique_ptr<DeltaCache>> cache =
        DeltaCache::Create(uint64_t{slots} * kPage, kPage);
    EXPECT_OK(cache);
    if (cache.ok()) cache_ = std::move(*cache);
    packer_ = std::make_unique<DeltaPacker>(cache_.get());
  }

  // Packs a packet of `entries` (Whole and Zero) into a buffer with room
  // for its pages that are not zero, whole, and checks that Pack wrote
  // nothing past its payload.
  Packet Pack(std::vector<uint64_t> entries) {
    Packet p;
    p.entries = std::move(entries);
    uint64_t room = 0;
    for (uint64_t e : p.entries) room += proto::IsZeroPageEntry(e) ? 0 : kPage;
    std::vector<uint8_t> out(room + kGuardBytes, kGuard);
    p.packed = packer_->Pack(region(), /*index=*/0, absl::MakeSpan(p.entries),
                             out.data(), &p.sent, &p.sent_offsets);
    EXPECT_LE(p.packed.payload_bytes, room);
    for (uint64_t i = p.packed.payload_bytes; i < out.size(); ++i) {
      if (out[i] != kGuard) {
        ADD_FAILURE() << "Pack wrote byte " << i << " past its payload of "
                      << p.packed.payload_bytes << " bytes";
        break;
      }
    }
    p.payload.assign(out.begin(), out.begin() + p.packed.payload_bytes);
    // Where sent pages point into `out`, they point into the copy kept.
    for (iovec& v : p.sent) {
      auto* at = static_cast<uint8_t*>(v.iov_base);
      if (at >= out.data() && at < out.data() + out.size()) {
        v.iov_base = p.payload.data() + (at - out.data());
      }
    }
    return p;
  }

  // Lands `p` at the destination as a receiver does: whole pages into
  // place in entry order, zero pages zeroed, then each record, in entry
  // order, checked and applied to the page the destination holds.
  void Land(const Packet& p) {
    uint64_t at = 0;
    for (uint64_t e : p.entries) {
      if (proto::IsZeroPageEntry(e)) {
        std::memset(dst(proto::PageOffsetOf(e) / kPage), 0, kPage);
      } else if (proto::IsWholePageEntry(e, kPage)) {
        ASSERT_LE(at + kPage, p.payload.size());
        std::memcpy(dst(e / kPage), p.payload.data() + at, kPage);
        at += kPage;
      }
    }
    for (uint64_t e : p.entries) {
      const uint32_t n = proto::DeltaBytesOf(e, kPage);
      if (n == 0) continue;
      ASSERT_LE(at + n, p.payload.size());
      const absl::Span<const uint8_t> record(p.payload.data() + at, n);
      ASSERT_OK(proto::CheckDelta(record, kPage));
      proto::ApplyDelta(record, dst(e / kPage), kPage);
      at += n;
    }
    EXPECT_EQ(at, p.payload.size()) << "payload bytes no entry names";
  }

  // Whether the destination holds page `page` as the source has it.
  bool Landed(uint64_t page) {
    return std::memcmp(src(page), dst(page), kPage) == 0;
  }
  // Whether `p.sent` is, page for page, what the destination now holds.
  void ExpectSentIsLanded(const Packet& p) {
    ASSERT_EQ(p.sent.size(), p.sent_offsets.size());
    for (size_t i = 0; i < p.sent.size(); ++i) {
      ASSERT_EQ(p.sent[i].iov_len, kPage);
      EXPECT_EQ(std::memcmp(p.sent[i].iov_base, dst(p.sent_offsets[i] / kPage),
                            kPage),
                0)
          << "sent page " << i << " (offset " << p.sent_offsets[i] << ")";
    }
  }

  uint8_t* src(uint64_t page) { return src_.data() + page * kPage; }
  uint8_t* dst(uint64_t page) { return dst_.data() + page * kPage; }
  DeltaCache& cache() { return *cache_; }
  DeltaPacker& packer() { return *packer_; }
  Region region() {
    Region r;
    r.id = 1;
    r.base = src_.data();
    r.length = src_.size();
    r.page_size = kPage;
    return r;
  }

 private:
  std::vector<uint8_t> src_, dst_;
  std::unique_ptr<DeltaCache> cache_;
  std::unique_ptr<DeltaPacker> packer_;
};

// Sends `entries` once, delivered, and lands them.
void SendAndLand(Packing& p, std::vector<uint64_t> entries) {
  const Packet first = p.Pack(std::move(entries));
  p.packer().Finish(/*delivered=*/true, /*channel=*/0, /*round=*/1);
  p.Land(first);
}

TEST(DeltaPacker, APageSeenFirstGoesWholeAndFillsTheCache) {
  Packing p(8, 8);
  const Packet first = p.Pack({Whole(1), Whole(4), Whole(2)});
  EXPECT_EQ(first.packed.delta_pages, 0u);
  EXPECT_EQ(first.packed.record_bytes, 0u);
  EXPECT_EQ(first.packed.payload_bytes, 3 * kPage);
  EXPECT_EQ(first.packed.cache.misses, 3u);
  EXPECT_EQ(first.packed.cache.hits, 0u);
  EXPECT_EQ(first.packed.cache.fresh, 3u);  // slots never written before
  // Whole pages keep their entries, and the payload is their bytes.
  EXPECT_THAT(first.entries, ElementsAre(Whole(1), Whole(4), Whole(2)));
  EXPECT_EQ(std::memcmp(first.payload.data(), p.src(1), kPage), 0);
  EXPECT_EQ(std::memcmp(first.payload.data() + kPage, p.src(4), kPage), 0);
  EXPECT_EQ(std::memcmp(first.payload.data() + 2 * kPage, p.src(2), kPage), 0);
  EXPECT_THAT(first.sent_offsets, ElementsAre(Whole(1), Whole(4), Whole(2)));
  ASSERT_NO_FATAL_FAILURE(p.Land(first));
  ASSERT_NO_FATAL_FAILURE(p.ExpectSentIsLanded(first));
  p.packer().Finish(/*delivered=*/true, 0, 1);
  EXPECT_EQ(p.cache().size(), 3u);
}

TEST(DeltaPacker, AnUnchangedPageGoesAsAnEmptyDelta) {
  Packing p(4, 4);
  ASSERT_NO_FATAL_FAILURE(SendAndLand(p, {Whole(2)}));
  const Packet again = p.Pack({Whole(2)});
  EXPECT_EQ(again.packed.cache.hits, 1u);
  EXPECT_EQ(again.packed.delta_pages, 1u);
  // The one run (0, 0): nothing changed.
  EXPECT_THAT(again.payload, ElementsAre(0, 0));
  EXPECT_EQ(again.packed.record_bytes, 2u);
  EXPECT_EQ(again.packed.payload_bytes, 2u);
  EXPECT_THAT(again.entries, ElementsAre(proto::DeltaPageEntry(Whole(2), 2)));
  ASSERT_NO_FATAL_FAILURE(p.Land(again));
  EXPECT_TRUE(p.Landed(2));
  ASSERT_NO_FATAL_FAILURE(p.ExpectSentIsLanded(again));
  p.packer().Finish(true, 0, 2);
}

TEST(DeltaPacker, ASlightlyChangedPageGoesAsADeltaThatLandsByteForByte) {
  Packing p(4, 4);
  ASSERT_NO_FATAL_FAILURE(SendAndLand(p, {Whole(0), Whole(3)}));
  // A counter's 8 bytes and a few scattered bytes.
  const uint64_t counter = 0x1122334455667788;
  std::memcpy(p.src(0) + 128, &counter, sizeof counter);
  p.src(0)[7] ^= 0x01;
  p.src(0)[kPage - 1] ^= 0x80;
  p.src(3)[2000] ^= 0xFF;
  const Packet again = p.Pack({Whole(0), Whole(3)});
  EXPECT_EQ(again.packed.delta_pages, 2u);
  EXPECT_EQ(again.packed.record_bytes, again.packed.payload_bytes);
  EXPECT_LT(again.packed.record_bytes, 64u);
  EXPECT_EQ(proto::DeltaBytesOf(again.entries[0], kPage) +
                proto::DeltaBytesOf(again.entries[1], kPage),
            again.packed.record_bytes);
  EXPECT_FALSE(p.Landed(0));
  ASSERT_NO_FATAL_FAILURE(p.Land(again));
  EXPECT_TRUE(p.Landed(0));
  EXPECT_TRUE(p.Landed(3));
  ASSERT_NO_FATAL_FAILURE(p.ExpectSentIsLanded(again));
  p.packer().Finish(true, 0, 2);
  // The copies are the pages as they went: the next packet is against them.
  p.src(0)[9] ^= 0x10;
  const Packet third = p.Pack({Whole(0)});
  EXPECT_EQ(third.packed.delta_pages, 1u);
  ASSERT_NO_FATAL_FAILURE(p.Land(third));
  EXPECT_TRUE(p.Landed(0));
  p.packer().Finish(true, 0, 3);
}

TEST(DeltaPacker, WholePagesComeFirstThenRecordsInEntryOrder) {
  Packing p(8, 8);
  ASSERT_NO_FATAL_FAILURE(SendAndLand(p, {Whole(0), Whole(1)}));
  p.src(0)[100] ^= 0x42;
  const Packet mixed = p.Pack({Whole(0), Whole(5), Whole(1)});
  EXPECT_EQ(mixed.packed.delta_pages, 2u);
  ASSERT_EQ(mixed.packed.payload_bytes, kPage + mixed.packed.record_bytes);
  EXPECT_EQ(std::memcmp(mixed.payload.data(), p.src(5), kPage), 0);
  EXPECT_EQ(mixed.entries[1], Whole(5));
  // Page 1's record, the unchanged one, is last.
  const uint32_t first = proto::DeltaBytesOf(mixed.entries[0], kPage);
  EXPECT_GT(first, 2u);
  EXPECT_EQ(proto::DeltaBytesOf(mixed.entries[2], kPage), 2u);
  EXPECT_THAT(std::vector<uint8_t>(mixed.payload.begin() + kPage + first,
                                   mixed.payload.end()),
              ElementsAre(0, 0));
  ASSERT_NO_FATAL_FAILURE(p.Land(mixed));
  for (uint64_t page : {0, 1, 5}) EXPECT_TRUE(p.Landed(page)) << page;
  p.packer().Finish(true, 0, 2);
}

// A record stands for its page while it takes under half of it
// (proto::MaxDeltaBytes, what the entry's low bits hold); past that the
// page goes whole.
TEST(DeltaPacker, ARecordMayTakeUnderHalfAPageAndNoMore) {
  const uint32_t max = proto::MaxDeltaBytes(kPage);
  // One run from byte 0: a 1-byte skip and a 2-byte length before it.
  const uint32_t longest_run = max - 3;
  Packing p(2, 2);
  ASSERT_NO_FATAL_FAILURE(SendAndLand(p, {Whole(0), Whole(1)}));
  for (uint32_t i = 0; i < longest_run; ++i) p.src(0)[i] ^= 0x5A;
  for (uint32_t i = 0; i < longest_run + 1; ++i) p.src(1)[i] ^= 0x5A;
  const Packet again = p.Pack({Whole(0), Whole(1)});
  EXPECT_EQ(again.packed.delta_pages, 1u);
  EXPECT_EQ(again.entries[0], proto::DeltaPageEntry(Whole(0), max));
  EXPECT_EQ(again.entries[1], Whole(1));
  EXPECT_EQ(again.packed.payload_bytes, kPage + max);
  ASSERT_NO_FATAL_FAILURE(p.Land(again));
  EXPECT_TRUE(p.Landed(0));
  EXPECT_TRUE(p.Landed(1));
  p.packer().Finish(true, 0, 2);
}

TEST(DeltaPacker, APageChangedTooMuchGoesWholeAndItsCopyIsRefreshed) {
  Packing p(4, 4);
  ASSERT_NO_FATAL_FAILURE(SendAndLand(p, {Whole(1)}));
  std::mt19937_64 rng(7);
  for (uint32_t i = 0; i < kPage; ++i)
    p.src(1)[i] = static_cast<uint8_t>(rng());
  const Packet again = p.Pack({Whole(1)});
  EXPECT_EQ(again.packed.cache.hits, 1u);
  EXPECT_EQ(again.packed.delta_pages, 0u);
  EXPECT_EQ(again.packed.record_bytes, 0u);
  EXPECT_THAT(again.entries, ElementsAre(Whole(1)));
  ASSERT_EQ(again.payload.size(), kPage);
  EXPECT_EQ(std::memcmp(again.payload.data(), p.src(1), kPage), 0);
  ASSERT_NO_FATAL_FAILURE(p.Land(again));
  ASSERT_NO_FATAL_FAILURE(p.ExpectSentIsLanded(again));
  p.packer().Finish(true, 0, 2);
  // Its copy is the page as it went whole: unchanged since, it goes empty.
  const Packet third = p.Pack({Whole(1)});
  EXPECT_THAT(third.payload, ElementsAre(0, 0));
  p.packer().Finish(true, 0, 3);
}

// A zero page goes as its flag alone, so the copy of what it was is
// stale: the page's next send goes whole.
TEST(DeltaPacker, AZeroPageGoesAsItsFlagAloneAndItsCopyIsForgotten) {
  Packing p(4, 4);
  ASSERT_NO_FATAL_FAILURE(SendAndLand(p, {Whole(0), Whole(2)}));
  std::memset(p.src(2), 0, kPage);
  p.src(0)[5] ^= 0x01;
  const Packet zeroed = p.Pack({Whole(0), Zero(2)});
  const auto record = static_cast<uint32_t>(zeroed.packed.record_bytes);
  EXPECT_THAT(zeroed.entries,
              ElementsAre(proto::DeltaPageEntry(Whole(0), record), Zero(2)));
  EXPECT_EQ(zeroed.packed.payload_bytes, zeroed.packed.record_bytes);
  EXPECT_THAT(zeroed.sent_offsets, ElementsAre(Whole(0)));
  ASSERT_NO_FATAL_FAILURE(p.Land(zeroed));
  EXPECT_TRUE(p.Landed(0));
  EXPECT_TRUE(p.Landed(2));
  p.packer().Finish(true, 0, 2);
  EXPECT_EQ(p.cache().size(), 1u);
  p.src(2)[0] = 1;
  const Packet after = p.Pack({Whole(2)});
  EXPECT_EQ(after.packed.cache.misses, 1u);
  EXPECT_THAT(after.entries, ElementsAre(Whole(2)));
  ASSERT_NO_FATAL_FAILURE(p.Land(after));
  EXPECT_TRUE(p.Landed(2));
  p.packer().Finish(true, 0, 3);
}

// Pages sent without the cache (Forget): their next send goes whole. The
// entries may carry the zero flag, as a packet's do.
TEST(DeltaPacker, AForgottenPageGoesWholeNextTime) {
  Packing p(4, 4);
  ASSERT_NO_FATAL_FAILURE(SendAndLand(p, {Whole(0), Whole(1), Whole(3)}));
  const std::vector<uint64_t> gone = {Whole(1), Zero(3)};
  p.packer().Forget(p.region(), 0, gone);
  EXPECT_EQ(p.cache().size(), 1u);
  const Packet again = p.Pack({Whole(0), Whole(1), Whole(3)});
  EXPECT_EQ(again.packed.cache.hits, 1u);
  EXPECT_EQ(again.packed.cache.misses, 2u);
  EXPECT_EQ(again.packed.delta_pages, 1u);
  EXPECT_EQ(again.entries[1], Whole(1));
  EXPECT_EQ(again.entries[2], Whole(3));
  ASSERT_NO_FATAL_FAILURE(p.Land(again));
  p.packer().Finish(true, 0, 2);
}

// Finish(delivered): the copies are what the destination holds, sent by
// that channel in that round, which the cache forgets if the channel is
// lost (DeltaCache::ForgetSentBy).
TEST(DeltaPacker, ADeliveredPacketsCopiesAreKeptAsItsChannelsAndRounds) {
  Packing p(4, 4);
  p.Pack({Whole(0), Whole(1)});
  p.packer().Finish(/*delivered=*/true, /*channel=*/3, /*round=*/5);
  EXPECT_EQ(p.cache().size(), 2u);
  p.cache().ForgetSentBy(/*channel=*/2, /*round=*/0);
  p.cache().ForgetSentBy(/*channel=*/3, /*round=*/6);
  EXPECT_EQ(p.cache().size(), 2u);
  p.cache().ForgetSentBy(/*channel=*/3, /*round=*/5);
  EXPECT_EQ(p.cache().size(), 0u);
}

// Finish(not delivered): the copies may not be what the destination holds,
// so they are forgotten, a hit's as well as a fill's, and the pages go
// whole next time.
TEST(DeltaPacker, AnUndeliveredPacketsCopiesAreForgotten) {
  Packing p(4, 4);
  ASSERT_NO_FATAL_FAILURE(SendAndLand(p, {Whole(0)}));
  p.src(0)[1] ^= 0x01;
  const Packet lost = p.Pack({Whole(0), Whole(2)});
  EXPECT_EQ(lost.packed.delta_pages, 1u);
  p.packer().Finish(/*delivered=*/false, 0, 2);
  EXPECT_EQ(p.cache().size(), 0u);
  const Packet again = p.Pack({Whole(0), Whole(2)});
  EXPECT_EQ(again.packed.cache.misses, 2u);
  EXPECT_EQ(again.packed.delta_pages, 0u);
  EXPECT_THAT(again.entries, ElementsAre(Whole(0), Whole(2)));
  ASSERT_NO_FATAL_FAILURE(p.Land(again));
  EXPECT_TRUE(p.Landed(0));
  EXPECT_TRUE(p.Landed(2));
  p.packer().Finish(true, 0, 3);
  EXPECT_EQ(p.cache().size(), 2u);
}

// A packet with more pages than the cache has free slots: the rest go
// whole from memory, uncached.
TEST(DeltaPacker, PagesPastTheCacheGoWholeFromMemory) {
  Packing p(4, 2);
  const Packet first = p.Pack({Whole(0), Whole(1), Whole(2)});
  EXPECT_EQ(first.packed.payload_bytes, 3 * kPage);
  EXPECT_EQ(first.packed.cache.misses, 3u);
  ASSERT_NO_FATAL_FAILURE(p.Land(first));
  for (uint64_t page : {0, 1, 2}) EXPECT_TRUE(p.Landed(page)) << page;
  ASSERT_NO_FATAL_FAILURE(p.ExpectSentIsLanded(first));
  p.packer().Finish(true, 0, 1);
  EXPECT_EQ(p.cache().size(), 2u);
  // The cached two go as deltas next time; the third whole again.
  const Packet again = p.Pack({Whole(0), Whole(1), Whole(2)});
  EXPECT_EQ(again.packed.delta_pages, 2u);
  EXPECT_EQ(again.entries[2], Whole(2));
  p.packer().Finish(true, 0, 2);
}

// The caller packs at most proto::kMaxDeltaPayloadBytes of pages, and Pack
// never needs more than those pages whole (a record is under half a page),
// whatever they did: every page at the longest record, or changed through.
TEST(DeltaPacker, APayloadNeverOutgrowsItsPagesWhole) {
  const uint64_t pages = proto::kMaxDeltaPayloadBytes / kPage;
  Packing p(pages, static_cast<uint32_t>(pages));
  std::vector<uint64_t> all;
  for (uint64_t i = 0; i < pages; ++i) all.push_back(Whole(i));
  ASSERT_NO_FATAL_FAILURE(SendAndLand(p, all));
  const uint32_t longest_run = proto::MaxDeltaBytes(kPage) - 3;
  for (uint64_t i = 0; i < pages; ++i) {
    // Odd pages one byte past the longest record: they go whole.
    const uint32_t n = longest_run + static_cast<uint32_t>(i % 2);
    for (uint32_t b = 0; b < n; ++b) p.src(i)[b] ^= 0xA5;
  }
  const Packet again = p.Pack(all);
  EXPECT_EQ(again.packed.delta_pages, pages / 2);
  EXPECT_EQ(again.packed.payload_bytes,
            pages / 2 * kPage + pages / 2 * proto::MaxDeltaBytes(kPage));
  EXPECT_LE(again.packed.payload_bytes, proto::kMaxDeltaPayloadBytes);
  ASSERT_NO_FATAL_FAILURE(p.Land(again));
  for (uint64_t i = 0; i < pages; ++i) ASSERT_TRUE(p.Landed(i)) << i;
  p.packer().Finish(true, 0, 2);
}

}  // namespace
}  // namespace ramferry::engine
