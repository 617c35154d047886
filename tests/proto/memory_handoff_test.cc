// The memory hand-off wire codec (proto/memory_handoff.h): offers and
// commands round trip, and every input the header's rules forbid is
// refused by the decoder (and, where it can be expressed, by the encoder).
#include "proto/memory_handoff.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/page_size.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace ramferry::proto {
namespace {

using ::ramferry::testing::StatusIs;

using ::testing::HasSubstr;

constexpr uint64_t kPage = 4096;

// Big-endian writer for hand-made messages, independent of the encoder.
struct Bytes {
  std::vector<uint8_t> b;
  Bytes& U16(uint16_t v) {
    b.push_back(v >> 8);
    b.push_back(v & 0xff);
    return *this;
  }
  Bytes& U32(uint32_t v) {
    U16(v >> 16);
    return U16(v & 0xffff);
  }
  Bytes& U64(uint64_t v) {
    U32(v >> 32);
    return U32(v & 0xffffffffu);
  }
  Bytes& Str(const std::string& s) {
    U16(static_cast<uint16_t>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
};

struct RawRegion {
  uint32_t id;
  uint32_t page_size = base::kSmallPageSize;
  uint64_t base;
  uint64_t length;
  uint64_t fd_offset = 0;
  std::string name;
};

std::vector<uint8_t> RawOffer(const std::vector<RawRegion>& regions,
                              uint16_t kind = 1, uint32_t flags = 0,
                              uint32_t magic = kHandoffMagic,
                              uint16_t version = kHandoffVersion,
                              int64_t count = -1) {
  Bytes w;
  w.U32(magic).U16(version).U16(kind).U32(flags).U32(1234);
  w.U32(count < 0 ? static_cast<uint32_t>(regions.size())
                  : static_cast<uint32_t>(count));
  for (const RawRegion& r : regions) {
    w.U32(r.id).U32(r.page_size).U64(r.base).U64(r.length).U64(r.fd_offset);
    w.Str(r.name);
  }
  return w.b;
}

std::vector<uint8_t> OneRegion(RawRegion r) { return RawOffer({r}); }

Offer ValidOffer(size_t regions, OfferKind kind = OfferKind::kExport,
                 uint32_t flags = 0) {
  Offer o;
  o.kind = kind;
  o.flags = flags;
  o.pid = 4242;
  for (size_t i = 0; i < regions; ++i) {
    OfferedRegion r;
    r.id = static_cast<uint32_t>(100 + i);
    r.base = 0x7f0000000000ull + i * 16 * kPage;
    r.length = (1 + i % 3) * kPage;
    r.fd_offset = i * 2 * kPage;
    r.name =
        std::string(i % (kMaxHandoffName + 1), static_cast<char>('a' + i % 26));
    o.regions.push_back(r);
  }
  return o;
}

void ExpectRoundTrip(const Offer& o) {
  absl::StatusOr<std::vector<uint8_t>> bytes = EncodeOffer(o);
  ASSERT_OK(bytes);
  EXPECT_LE(bytes->size(), kMaxOfferBytes);
  absl::StatusOr<Offer> back = DecodeOffer(*bytes);
  ASSERT_OK(back);
  EXPECT_EQ(*back, o);
  absl::StatusOr<std::vector<uint8_t>> again = EncodeOffer(*back);
  ASSERT_OK(again);
  EXPECT_EQ(*again, *bytes);
}

TEST(MemoryOfferTest, OneRegionRoundTrips) {
  ExpectRoundTrip(ValidOffer(1));
  ExpectRoundTrip(ValidOffer(1, OfferKind::kHandOver));
  ExpectRoundTrip(ValidOffer(1, OfferKind::kExport, kOfferPausesItself));
}

TEST(MemoryOfferTest, SixtyFourRegionsWithLongNamesRoundTrip) {
  // The largest offer: a hand-over carrying a digest per region.
  Offer o =
      ValidOffer(kMaxHandoffRegions, OfferKind::kHandOver, kOfferRegionDigests);
  for (OfferedRegion& r : o.regions) {
    r.name = std::string(kMaxHandoffName, 'n');
    r.digest = r.id;
  }
  ExpectRoundTrip(o);
  EXPECT_EQ(EncodeOffer(o)->size(), kMaxOfferBytes);
  Offer e =
      ValidOffer(kMaxHandoffRegions, OfferKind::kExport, kOfferPausesItself);
  ExpectRoundTrip(e);
  EXPECT_EQ(e.fd_count(), kMaxHandoffRegions + kExportFixedFds);
  EXPECT_EQ(o.fd_count(), kMaxHandoffRegions);
}

TEST(MemoryOfferTest, EncodesTheDocumentedLayout) {
  Offer o = ValidOffer(1, OfferKind::kExport, kOfferPausesItself);
  o.regions[0].name = "heap";
  std::vector<uint8_t> want =
      RawOffer({{o.regions[0].id, base::kSmallPageSize, o.regions[0].base,
                 o.regions[0].length, o.regions[0].fd_offset, "heap"}},
               1, kOfferPausesItself);
  // The hand-made pid is 1234.
  o.pid = 1234;
  EXPECT_EQ(*EncodeOffer(o), want);
  absl::StatusOr<Offer> d = DecodeOffer(want);
  ASSERT_OK(d);
  EXPECT_EQ(d->pid, 1234u);
  EXPECT_EQ(d->flags, kOfferPausesItself);
}

TEST(MemoryOfferTest, RegionsInAnyAddressOrderAndAdjacentAreFine) {
  absl::StatusOr<Offer> d =
      DecodeOffer(RawOffer({{2, base::kSmallPageSize, 4 * kPage, kPage},
                            {1, base::kSmallPageSize, 3 * kPage, kPage}}));
  ASSERT_OK(d);
  EXPECT_EQ(d->regions[0].id, 2u);
}

// Refused with `code`, for the reason `cause` names (a part of the
// message): a decoder that refuses for another reason fails the test.
void ExpectRefused(const std::vector<uint8_t>& bytes, const std::string& cause,
                   absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  ASSERT_FALSE(cause.empty());
  EXPECT_THAT(DecodeOffer(bytes), StatusIs(code, HasSubstr(cause)));
}

const RawRegion kGood{1,  base::kSmallPageSize, 16 * kPage, 2 * kPage, kPage,
                      "r"};

TEST(MemoryOfferTest, RefusesWrongMagic) {
  ExpectRefused(RawOffer({kGood}, 1, 0, kHandoffMagic ^ 1), "wrong magic");
}

TEST(MemoryOfferTest, RefusesOtherVersionAsFailedPrecondition) {
  // Every version but ours is refused, the one before it too: a version-1
  // export would hand over its userfaultfd, which this side no longer takes.
  for (uint16_t v : {uint16_t{0}, uint16_t(kHandoffVersion - 1),
                     uint16_t(kHandoffVersion + 1)}) {
    ExpectRefused(RawOffer({kGood}, 1, 0, kHandoffMagic, v),
                  absl::StrCat("version ", v),
                  absl::StatusCode::kFailedPrecondition);
  }
}

TEST(MemoryOfferTest, RefusesUnknownKind) {
  ExpectRefused(RawOffer({kGood}, 0), "kind 0,");
  ExpectRefused(RawOffer({kGood}, 3), "kind 3,");
  ExpectRefused(RawOffer({kGood}, 0xffff), "kind 65535,");
}

TEST(MemoryOfferTest, RefusesUnknownFlags) {
  ExpectRefused(RawOffer({kGood}, 1, 8), "flags 0x8,");
  ExpectRefused(RawOffer({kGood}, 2, 0x80000001u), "flags 0x80000001,");
}

// Consent is an export's to give, digests a hand-over's to carry: each
// flag is refused on the other kind.
TEST(MemoryOfferTest, EachKindHasItsOwnFlags) {
  ExpectRefused(RawOffer({kGood}, 1, kOfferRegionDigests), "flags 0x4,");
  ExpectRefused(RawOffer({kGood}, 2, kOfferAllowsHandOver), "flags 0x2,");
  EXPECT_THAT(
      EncodeOffer(ValidOffer(1, OfferKind::kExport, kOfferRegionDigests)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("unknown kind or flags")));
  EXPECT_THAT(
      EncodeOffer(ValidOffer(1, OfferKind::kHandOver, kOfferAllowsHandOver)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("unknown kind or flags")));
  absl::StatusOr<std::vector<uint8_t>> consent = EncodeOffer(ValidOffer(
      2, OfferKind::kExport, kOfferPausesItself | kOfferAllowsHandOver));
  ASSERT_OK(consent);
  absl::StatusOr<Offer> back = DecodeOffer(*consent);
  ASSERT_OK(back);
  EXPECT_EQ(back->flags, kOfferPausesItself | kOfferAllowsHandOver);
}

TEST(MemoryOfferTest, DigestsRideEachRegionAndRoundTrip) {
  Offer o = ValidOffer(3, OfferKind::kHandOver, kOfferRegionDigests);
  for (size_t i = 0; i < o.regions.size(); ++i) {
    o.regions[i].digest = 0x0123456789abcdefull * (i + 1);
  }
  absl::StatusOr<std::vector<uint8_t>> b = EncodeOffer(o);
  ASSERT_OK(b);
  // Eight bytes after each region's name, nothing else.
  absl::StatusOr<std::vector<uint8_t>> plain =
      EncodeOffer(ValidOffer(3, OfferKind::kHandOver));
  ASSERT_OK(plain);
  EXPECT_EQ(b->size(), plain->size() + 3 * 8);
  EXPECT_EQ(std::vector<uint8_t>(b->end() - 8, b->end()),
            Bytes().U64(o.regions[2].digest).b);
  absl::StatusOr<Offer> d = DecodeOffer(*b);
  ASSERT_OK(d);
  EXPECT_EQ(*d, o);
  // Cut inside the last digest: refused.
  b->pop_back();
  EXPECT_THAT(
      DecodeOffer(*b),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("memory offer of 148 bytes ends inside region 2 of 3")));
  // A digest without the flag cannot be encoded (it would be lost).
  Offer stray = ValidOffer(1, OfferKind::kHandOver);
  stray.regions[0].digest = 1;
  EXPECT_THAT(
      EncodeOffer(stray),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("a region digest without kOfferRegionDigests")));
  // The largest offer, digests included, fits the receive buffer.
  Offer big =
      ValidOffer(kMaxHandoffRegions, OfferKind::kHandOver, kOfferRegionDigests);
  for (OfferedRegion& r : big.regions) r.name.assign(kMaxHandoffName, 'n');
  absl::StatusOr<std::vector<uint8_t>> max = EncodeOffer(big);
  ASSERT_OK(max);
  EXPECT_LE(max->size(), kMaxOfferBytes);
}

TEST(MemoryOfferTest, RefusesZeroRegions) {
  ExpectRefused(RawOffer({}), "0 regions: want");
}

TEST(MemoryOfferTest, RefusesSixtyFiveRegions) {
  std::vector<RawRegion> rs;
  for (uint32_t i = 0; i < kMaxHandoffRegions + 1; ++i) {
    rs.push_back({i, base::kSmallPageSize, (i + 1) * 2 * kPage, kPage});
  }
  ExpectRefused(RawOffer(rs), "65 regions: want");
  // A count of 65 with nothing after it: refused by count, not read on.
  ExpectRefused(RawOffer({}, 1, 0, kHandoffMagic, kHandoffVersion, 65),
                "65 regions: want");
  ExpectRefused(
      RawOffer({}, 1, 0, kHandoffMagic, kHandoffVersion, 0xffffffffll),
      "4294967295 regions: want");
}

TEST(MemoryOfferTest, RefusesOtherPageSizes) {
  for (uint32_t ps : {0u, 512u, 8192u, 2u << 20}) {
    RawRegion r = kGood;
    r.page_size = ps;
    ExpectRefused(OneRegion(r), "only 4 KiB pages are handed over");
  }
}

TEST(MemoryOfferTest, RefusesUnalignedBase) {
  RawRegion r = kGood;
  r.base += 1;
  ExpectRefused(OneRegion(r), "not whole 4 KiB pages at page-aligned");
  r.base = kGood.base + 2048;
  ExpectRefused(OneRegion(r), "not whole 4 KiB pages at page-aligned");
}

TEST(MemoryOfferTest, RefusesUnalignedLength) {
  RawRegion r = kGood;
  r.length = kPage + 1;
  ExpectRefused(OneRegion(r), "not whole 4 KiB pages at page-aligned");
  r.length = 100;
  ExpectRefused(OneRegion(r), "not whole 4 KiB pages at page-aligned");
}

TEST(MemoryOfferTest, RefusesUnalignedOffset) {
  RawRegion r = kGood;
  r.fd_offset = 512;
  ExpectRefused(OneRegion(r), "not whole 4 KiB pages at page-aligned");
}

TEST(MemoryOfferTest, RefusesZeroLength) {
  RawRegion r = kGood;
  r.length = 0;
  ExpectRefused(OneRegion(r), "not whole 4 KiB pages at page-aligned");
}

TEST(MemoryOfferTest, RefusesWrappingBasePlusLength) {
  RawRegion r = kGood;
  r.base = ~uint64_t{0} - kPage + 1;  // last page
  r.length = 2 * kPage;
  ExpectRefused(OneRegion(r), "wraps past the end of the address space");
  r.base = 0x8000000000000000ull;
  r.length = 0x8000000000000000ull + kPage;
  ExpectRefused(OneRegion(r), "wraps past the end of the address space");
}

TEST(MemoryOfferTest, RefusesWrappingFileOffsetPlusLength) {
  RawRegion r = kGood;
  r.fd_offset = ~uint64_t{0} - kPage + 1;
  r.length = 2 * kPage;
  ExpectRefused(OneRegion(r), "wraps past the end of a file's offsets");
}

TEST(MemoryOfferTest, RefusesOverlappingRegions) {
  ExpectRefused(RawOffer({{1, base::kSmallPageSize, 4 * kPage, 2 * kPage},
                          {2, base::kSmallPageSize, 5 * kPage, kPage}}),
                "overlap");
  // The same range twice, and one inside another listed first.
  ExpectRefused(RawOffer({{1, base::kSmallPageSize, 4 * kPage, kPage},
                          {2, base::kSmallPageSize, 4 * kPage, kPage}}),
                "overlap");
  ExpectRefused(RawOffer({{1, base::kSmallPageSize, 10 * kPage, kPage},
                          {2, base::kSmallPageSize, 8 * kPage, 8 * kPage}}),
                "overlap");
}

TEST(MemoryOfferTest, RefusesDuplicateIds) {
  ExpectRefused(RawOffer({{7, base::kSmallPageSize, 4 * kPage, kPage},
                          {8, base::kSmallPageSize, 6 * kPage, kPage},
                          {7, base::kSmallPageSize, 8 * kPage, kPage}}),
                "twice");
}

TEST(MemoryOfferTest, RefusesNameTooLong) {
  RawRegion r = kGood;
  r.name = std::string(kMaxHandoffName, 'x');
  EXPECT_OK(DecodeOffer(OneRegion(r)));
  r.name.push_back('x');
  ExpectRefused(OneRegion(r), "name is 65 bytes");
}

TEST(MemoryOfferTest, RefusesEveryTruncation) {
  for (size_t regions : {size_t{1}, size_t{3}}) {
    absl::StatusOr<std::vector<uint8_t>> full =
        EncodeOffer(ValidOffer(regions));
    ASSERT_OK(full);
    ASSERT_OK(DecodeOffer(*full));
    for (size_t n = 0; n < full->size(); ++n) {
      std::vector<uint8_t> prefix(full->begin(), full->begin() + n);
      // What the prefix cuts: the magic (4 bytes), then version and kind
      // (4 more: the magic is right, so the offer is cut, not foreign);
      // the flags, pid and region count (12 more); or a region.
      const char* cause = n < 4    ? "wrong magic"
                          : n < 8  ? "memory offer cut short"
                          : n < 20 ? "want kind 1 or 2"
                                   : "ends inside region";
      EXPECT_THAT(
          DecodeOffer(prefix),
          StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(cause)))
          << n << " of " << full->size() << " bytes";
    }
  }
}

TEST(MemoryOfferTest, RefusesTrailingBytes) {
  std::vector<uint8_t> b = OneRegion(kGood);
  b.push_back(0);
  ExpectRefused(b, "after its last");
}

TEST(MemoryOfferTest, EncodeRefusesWhatDecodeRefuses) {
  auto refused = [](const Offer& o, const std::string& cause) {
    EXPECT_THAT(EncodeOffer(o),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(cause)));
  };
  Offer o = ValidOffer(2);
  refused(Offer{}, "with 0 regions");
  refused(ValidOffer(kMaxHandoffRegions + 1),
          absl::StrCat("with ", kMaxHandoffRegions + 1, " regions"));
  Offer x = o;
  x.kind = static_cast<OfferKind>(3);
  refused(x, "unknown kind or flags");
  x = o;
  x.flags = 8;
  refused(x, "unknown kind or flags");
  x = o;
  x.regions[0].base += 1;
  refused(x, "not whole 4 KiB pages");
  x = o;
  x.regions[0].length = 0;
  refused(x, "not whole 4 KiB pages");
  x = o;
  x.regions[0].length = kPage + 8;
  refused(x, "not whole 4 KiB pages");
  x = o;
  x.regions[0].fd_offset = 8;
  refused(x, "not whole 4 KiB pages");
  x = o;
  x.regions[0].base = ~uint64_t{0} - kPage + 1;
  x.regions[0].length = 2 * kPage;
  refused(x, "wraps past the end of the address space");
  x = o;
  x.regions[1].base = x.regions[0].base;
  refused(x, "overlap");
  x = o;
  x.regions[1].id = x.regions[0].id;
  refused(x, "appears twice");
  x = o;
  x.regions[0].name = std::string(kMaxHandoffName + 1, 'n');
  refused(x, absl::StrCat("name is ", kMaxHandoffName + 1, " bytes"));
}

TEST(MemoryCommandTest, RoundTripsEveryType) {
  for (HandoffCommand t : {HandoffCommand::kPause, HandoffCommand::kPaused,
                           HandoffCommand::kResume, HandoffCommand::kResumed,
                           HandoffCommand::kMigrated, HandoffCommand::kAdopted,
                           HandoffCommand::kHandOverRequest}) {
    for (uint64_t v : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) {
      const CommandMessage c{t, v};
      const std::vector<uint8_t> b = EncodeCommand(c);
      ASSERT_EQ(b.size(), kCommandBytes);
      EXPECT_EQ(b, Bytes()
                       .U32(kHandoffMagic)
                       .U16(static_cast<uint16_t>(t))
                       .U16(0)
                       .U64(v)
                       .b);
      absl::StatusOr<CommandMessage> d = DecodeCommand(b);
      ASSERT_OK(d);
      EXPECT_EQ(*d, c);
    }
    EXPECT_STRNE(HandoffCommandName(t), "UNKNOWN");
  }
}

std::vector<uint8_t> RawCommand(uint32_t magic, uint16_t type, uint16_t zero,
                                uint64_t value) {
  return Bytes().U32(magic).U16(type).U16(zero).U64(value).b;
}

TEST(MemoryCommandTest, RefusesBadMagic) {
  EXPECT_THAT(
      DecodeCommand(RawCommand(kHandoffMagic + 1, 1, 0, 0)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("bad memory hand-off command (16 bytes, type 1)")));
}

TEST(MemoryCommandTest, RefusesNonzeroReserved) {
  EXPECT_THAT(
      DecodeCommand(RawCommand(kHandoffMagic, 1, 1, 0)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("bad memory hand-off command (16 bytes, type 1)")));
  EXPECT_THAT(
      DecodeCommand(RawCommand(kHandoffMagic, 1, 0x8000, 0)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("bad memory hand-off command (16 bytes, type 1)")));
}

// A grant's value is its descriptor count, one per region; a refusal's a
// known reason: anything else is refused.
TEST(MemoryCommandTest, GrantsAndRefusalsCarryOnlyTheirValues) {
  for (uint64_t v : {uint64_t{1}, uint64_t{kMaxHandoffRegions}}) {
    absl::StatusOr<CommandMessage> d =
        DecodeCommand(EncodeCommand({HandoffCommand::kHandOverGrant, v}));
    ASSERT_OK(d) << v;
    EXPECT_EQ(d->value, v);
  }
  for (uint64_t v :
       {uint64_t{0}, uint64_t{kMaxHandoffRegions + 1}, ~uint64_t{0}}) {
    EXPECT_THAT(
        DecodeCommand(EncodeCommand({HandoffCommand::kHandOverGrant, v})),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr("bad memory hand-off command (16 bytes, type 8)")))
        << v;
  }
  for (RefusalReason r :
       {RefusalReason::kNotAllowed, RefusalReason::kNotPaused,
        RefusalReason::kCannotReopen, RefusalReason::kDigestMismatch}) {
    const uint64_t v = static_cast<uint64_t>(r);
    absl::StatusOr<CommandMessage> d =
        DecodeCommand(EncodeCommand({HandoffCommand::kRefused, v}));
    ASSERT_OK(d) << v;
    EXPECT_STRNE(RefusalReasonText(r), "unknown reason");
  }
  for (uint64_t v : {uint64_t{0}, uint64_t{5}, ~uint64_t{0}}) {
    EXPECT_THAT(
        DecodeCommand(EncodeCommand({HandoffCommand::kRefused, v})),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr("bad memory hand-off command (16 bytes, type 9)")))
        << v;
  }
}

TEST(MemoryCommandTest, RefusesUnknownType) {
  for (uint16_t t : {uint16_t{0}, uint16_t{10}, uint16_t{0xffff}}) {
    absl::StatusOr<CommandMessage> d =
        DecodeCommand(RawCommand(kHandoffMagic, t, 0, 0));
    EXPECT_THAT(
        d, StatusIs(absl::StatusCode::kInvalidArgument,
                    HasSubstr("bad memory hand-off command (16 bytes, type")))
        << t;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(MemoryCommandTest, RefusesWrongLength) {
  const std::vector<uint8_t> good = EncodeCommand({HandoffCommand::kPause, 0});
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_THAT(DecodeCommand(absl::MakeConstSpan(good.data(), n)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("bad memory hand-off command")))
        << n;
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_THAT(
      DecodeCommand(longer),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("bad memory hand-off command (17 bytes, type 1)")));
  // An offer is not a command.
  EXPECT_THAT(
      DecodeCommand(*EncodeOffer(ValidOffer(1))),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("bad memory hand-off command (54 bytes, type 2)")));
}

}  // namespace
}  // namespace ramferry::proto
