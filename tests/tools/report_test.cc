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

}  // namespace
}  // namespace ramferry::migrate
