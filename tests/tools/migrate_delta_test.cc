// ramferry-migrate --delta as a user runs it: both ends as processes, a
// workload storing 8 bytes at a time into its dirty set, and the report's
// delta figures checked against themselves and the destination's.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/migrate_cli.h"
#include "tests/support/subprocess.h"

namespace ramferry {
namespace {

using testing::CommandResult;
using ::testing::HasSubstr;
using testing::kMigrate;
using testing::ParseJson;
using testing::RunCommand;
using Json = nlohmann::json;

uint64_t ChannelSum(const Json& report, const char* key) {
  uint64_t n = 0;
  for (const Json& c : report["channel_stats"]) n += c[key].get<uint64_t>();
  return n;
}

Json Demo(std::vector<std::string> args) {
  std::vector<std::string> argv = {kMigrate,
                                   "--demo",
                                   "--json",
                                   "--size=64MiB",
                                   "--dirty-set=16MiB",
                                   "--dirty-rate=20000pages",
                                   "--max-rounds=5",
                                   "--stall-rounds=0",
                                   "--downtime-limit=1us"};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  Json j = ParseJson(r);
  EXPECT_EQ(j["verified"], true) << r.err;
  return j;
}

// Encrypted, compressed, zero-copy, four channels: the records go sealed
// and inside zstd frames, and the destination applies every one.
TEST(MigrateDelta, ReSentPagesGoAsDeltasWithEveryOptionOn) {
  const Json j = Demo({"--delta=on", "--transport=tcp-zerocopy",
                       "--protect=encrypt", "--compress=on", "--channels=4"});
  SCOPED_TRACE(j.dump());
  const Json& d = j["delta"];
  EXPECT_GT(d["pages"].get<uint64_t>(), 0u);
  EXPECT_GT(d["cache_hits"].get<uint64_t>(), 0u);
  EXPECT_LT(d["record_bytes"].get<uint64_t>(),
            d["page_bytes"].get<uint64_t>() / 4);
  EXPECT_EQ(
      d["bytes_saved"].get<uint64_t>(),
      d["page_bytes"].get<uint64_t>() - d["record_bytes"].get<uint64_t>());
  EXPECT_EQ(ChannelSum(j["destination"], "delta_pages"),
            d["pages"].get<uint64_t>());
  // Every round on the wire. Round 1's re-sent pages went whole (they
  // filled the cache); the rounds after it, together, cost well under
  // that per page. Per page, because how many pages a round carries
  // depends on how long the round before it took (CI saw round 3 carry
  // half of round 1's pages on a loaded machine, a third of them new to
  // the cache).
  const Json& wire = j["wire_bytes_per_round"];
  const Json& pages = j["pages_per_round"];
  ASSERT_EQ(wire.size(), pages.size());
  ASSERT_GE(wire.size(), 4u);
  uint64_t later_wire = 0, later_pages = 0;
  for (size_t i = 2; i < wire.size(); ++i) {
    later_wire += wire[i].get<uint64_t>();
    later_pages += pages[i].get<uint64_t>();
  }
  ASSERT_GT(later_pages, 0u);
  const double round1_per_page = wire[1].get<double>() / pages[1].get<double>();
  EXPECT_LT(static_cast<double>(later_wire) / static_cast<double>(later_pages),
            0.9 * round1_per_page);
}

TEST(MigrateDelta, TheTextReportSaysWhatDeltasSaved) {
  CommandResult r =
      RunCommand({kMigrate, "--demo", "--size=32MiB", "--dirty-set=8MiB",
                  "--dirty-rate=20000pages", "--max-rounds=3",
                  "--stall-rounds=0", "--downtime-limit=1us", "--delta=on"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("pages as deltas"));
  EXPECT_THAT(r.out, HasSubstr("evictions"));
}

TEST(MigrateDelta, OnIsRefusedOnRdmaWithTheReason) {
  CommandResult r = RunCommand(
      {kMigrate, "--role=source", "--connect=127.0.0.1:1", "--size=16MiB",
       "--insecure", "--transport=rdma", "--delta=on"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("nothing applies a delta"));
}

}  // namespace
}  // namespace ramferry
