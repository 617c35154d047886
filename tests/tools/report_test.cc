// The migration report names the channels a session went on without
// (--survive-channel-loss), in the table and in the JSON.
#include "tools/migrate/report.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ramferry::migrate {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

PrecopyReport WithALoss() {
  PrecopyReport r;
  r.stats.channels.resize(4);
  for (uint32_t c = 0; c < 4; ++c) r.stats.channels[c].channel = c;
  r.stats.channels[2].lost = 1;
  r.stats.channels_lost.push_back({2, 3, "channel 2: connection reset"});
  r.stats.resent_pages = 417;
  return r;
}

TEST(MigrateReport, SourceTableSaysWhichChannelWasLostWhenAndWhy) {
  const std::string t = SourceTable(RunDescription{}, WithALoss());
  EXPECT_THAT(t, HasSubstr("channels lost    channel 2 in round 3 (channel 2: "
                           "connection reset); 417 pages re-sent"));
}

TEST(MigrateReport, SourceTableSaysNoneWithoutALoss) {
  EXPECT_THAT(SourceTable(RunDescription{}, PrecopyReport{}),
              HasSubstr("channels lost    none"));
}

TEST(MigrateReport, SourceJsonListsTheLossAndTheResentPages) {
  const std::string j = SourceJson(RunDescription{}, WithALoss(), "");
  EXPECT_THAT(j, HasSubstr(R"("resent_pages":417)"));
  EXPECT_THAT(j, HasSubstr(R"("channels_lost":[{"channel":2,"round":3,)"
                           R"("reason":"channel 2: connection reset"}])"));
  EXPECT_THAT(j, HasSubstr(R"("lost":1)"));
}

TEST(MigrateReport, DestinationReportsTheLossToo) {
  DestinationReport d;
  d.stats.channels_lost.push_back({1, 0, "source: reset"});
  EXPECT_THAT(DestinationTable(d),
              HasSubstr("channels lost: channel 1 in round 0 (source: reset)"));
  EXPECT_THAT(DestinationJson(d),
              HasSubstr(R"("channels_lost":[{"channel":1,"round":0,)"));
  EXPECT_THAT(DestinationTable(DestinationReport{}),
              Not(HasSubstr("channels lost")));
}

// Channels 0 and 2 went to one link, 1 and 3 to another; 2 was lost.
PrecopyReport OverTwoLinks() {
  PrecopyReport r = WithALoss();
  r.transfer_s = 2;
  for (uint32_t c = 0; c < 4; ++c) {
    ChannelStats& s = r.stats.channels[c];
    s.endpoint = c % 2 ? "10.77.1.2:7070" : "10.77.0.2:7070";
    s.payload_bytes = 1'000'000'000;
    s.header_bytes = 1'000'000 * (c + 1);
  }
  return r;
}

TEST(MigrateReport, EachLinkGetsALineWithItsChannelsBytesAndRate) {
  RunDescription run;
  run.link_rates = {{"10.77.0.2", "1gbit"}, {"10.77.1.2", "500mbit"}};
  const std::string t = SourceTable(run, OverTwoLinks());
  EXPECT_THAT(t, HasSubstr("link             10.77.0.2:7070 (1gbit): "
                           "channels 0,2 (1 lost), "));
  EXPECT_THAT(t, HasSubstr("link             10.77.1.2:7070 (500mbit): "
                           "channels 1,3, "));
  // (2e9 + 6e6 bytes) / 2 s
  EXPECT_THAT(t, HasSubstr("1.003 GB/s\n"));
  const std::string j = SourceJson(run, OverTwoLinks(), "");
  EXPECT_THAT(j, HasSubstr(R"("links":[{"endpoint":"10.77.0.2:7070",)"
                           R"("channels":[0,2],"channels_lost":1,)"
                           R"("payload_bytes":2000000000,"bytes":2004000000,)"
                           R"("gb_per_s":1.002,"rate":"1gbit"})"));
  EXPECT_THAT(j, HasSubstr(R"("endpoint":"10.77.1.2:7070")"));
}

TEST(MigrateReport, OneLinkWithoutARateHasNoLinkLine) {
  PrecopyReport r = OverTwoLinks();
  for (ChannelStats& c : r.stats.channels) c.endpoint = "10.0.0.2:7070";
  EXPECT_THAT(SourceTable(RunDescription{}, r), Not(HasSubstr("  link  ")));
  EXPECT_THAT(SourceJson(RunDescription{}, r, ""),
              HasSubstr(R"("channels":[0,1,2,3],"channels_lost":1,)"));
}

}  // namespace
}  // namespace ramferry::migrate
